"""Canonical text lines for NVML readings.

Every reading the agent takes becomes one line of text, so the same YAML rule packs that
read job logs decide what a GPU reading means. Two families:

* an NVML Xid event is written exactly like the kernel's own line
  (``NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, ...``), so the one
  Xid table classifies both sources;
* every other reading is ``nvml gpu=<index> pci=<pci> <metric> key=value ...``, which the
  ``gpu-metrics`` pack reads.

The formats are public: rule authors match on them. Change them only with the pack.
"""

from __future__ import annotations

from collections.abc import Mapping

UNKNOWN_PCI = "unknown"


def kernel_pci(bus_id: str) -> str:
    """NVML's bus id (``00000000:3B:00.0``) in the kernel's Xid form (``0000:3b:00``)."""
    parts = bus_id.strip().lower().split(":")
    if len(parts) != 3:
        return bus_id.strip().lower() or UNKNOWN_PCI
    domain, bus, devfn = parts
    return f"{domain[-4:].rjust(4, '0')}:{bus}:{devfn.split('.', 1)[0]}"


def xid_line(pci: str, code: int) -> str:
    """An NVML Xid event in the kernel's ``NVRM: Xid`` form."""
    return (
        f"NVRM: Xid (PCI:{pci}): {code}, pid='<unknown>', name=<unknown>, "
        "reported by the NVML event API"
    )


def metric_line(gpu: str, pci: str, metric: str, values: Mapping[str, object]) -> str:
    """``nvml gpu=0 pci=0000:3b:00 row_remap pending=yes failure=no``."""
    rendered = " ".join(f"{key}={_value(value)}" for key, value in values.items())
    head = f"nvml gpu={gpu} pci={pci} {metric}"
    return f"{head} {rendered}" if rendered else head


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple | set | frozenset):
        return ",".join(str(item) for item in value) or "none"
    return str(value)
