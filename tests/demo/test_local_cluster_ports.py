"""Where the jobs of local clusters listen for their rendezvous: never where a cluster's daemon
or the kernel's outgoing connections take ports."""

from __future__ import annotations

from pathlib import Path

from resurrect.demo.local_cluster import DAEMON_PORTS, RENDEZVOUS_BASES, rendezvous_port_base


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def test_a_rendezvous_base_lies_below_daemon_ports_and_the_ephemeral_range() -> None:
    bases = {rendezvous_port_base() for _ in range(200)}
    assert bases <= set(RENDEZVOUS_BASES)
    # the example job listens on base + job id * 7 + restart: room for a few hundred jobs
    assert max(RENDEZVOUS_BASES) + 7 * 250 < min(DAEMON_PORTS.start, _ephemeral_low())


def test_a_seeded_base_is_the_same_every_run() -> None:
    assert rendezvous_port_base(11) == rendezvous_port_base(11)
    assert rendezvous_port_base(11) != rendezvous_port_base(12)
