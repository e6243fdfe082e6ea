"""Node agent overhead: CPU % and memory RSS while watching 8 fake GPUs at the default interval.

Three processes run side by side for the same window, measured from /proc:

* ``idle``: a bare Python interpreter sleeping (the floor);
* ``idle_imports``: Python with the agent's modules and rule engine loaded, sleeping (what
  importing costs, separated from what watching costs);
* ``agent``: the real :class:`NodeAgent` with default settings (poll every 5 s, heartbeat
  every 2 s, Xid event wait in 1 s slices) over :class:`FakeNvml` with 8 GPUs and 18 NVLinks
  each, the shipped rule packs, and a reporter that drops what it is given.

The fake NVML answers from memory; real NVML calls cost more (ioctl into the driver). With
``--nvml real`` (on a GPU node, nvidia-ml-py installed) the agent watches this machine's real
GPUs through pynvml instead, its calls counted, and a fourth process times the agent's poll
alone (every reading of every GPU, ``NvmlSource.poll``) as wall and CPU ms per poll.

    python benchmarks/agent_overhead.py [--duration 30] [--nvml fake|real] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def rss_mib(pid: int) -> float:
    resident = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    return resident * PAGE / 2**20


# -- the measured processes --------------------------------------------------------------


class DropReporter:
    """Counts what the agent sends; sends nothing."""

    def __init__(self) -> None:
        self.beats = 0
        self.batches = 0

    async def heartbeat(self, beat: object) -> None:
        self.beats += 1

    async def findings(self, findings: object) -> None:
        self.batches += 1

    async def stopped(self, stopped: object) -> None:
        return None


def child_idle() -> None:
    signal.sigwait({signal.SIGTERM})


def child_idle_imports() -> None:
    from resurrect.rules.engine import load_engine
    from resurrect.sensors.node_agent import NodeAgent  # noqa: F401

    load_engine()
    signal.sigwait({signal.SIGTERM})


class CountingNvml:
    """The real pynvml, each call counted by name (as :class:`FakeNvml` counts its own)."""

    def __init__(self, module: Any) -> None:
        self._module = module
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._module, name)
        if not (name.startswith("nvml") and callable(found)):
            return found

        def counted(*args: Any) -> Any:
            self.calls[name] += 1
            return found(*args)

        return counted


def nvml_for(kind: str) -> Any:
    """8 fake GPUs, or this machine's GPUs through pynvml, counting calls either way."""
    if kind == "real":
        from resurrect.sensors.node_agent.nvml_api import load_pynvml

        module = load_pynvml()
        if module is None:
            raise SystemExit("--nvml real needs nvidia-ml-py (pynvml)")
        return CountingNvml(module)
    from resurrect.sensors.node_agent import FakeNvml

    return FakeNvml.with_gpus(8)


def child_agent() -> None:
    from resurrect.rules.engine import load_engine
    from resurrect.sensors.node_agent import AgentSettings, NodeAgent

    nvml = nvml_for(os.environ.get("AGENT_OVERHEAD_NVML", "fake"))
    settings = AgentSettings(node_name="bench", kernel_log=False)
    agent = NodeAgent(settings, nvml=nvml, engine=load_engine(), reporter=DropReporter())

    async def main() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await agent.run(stop)

    asyncio.run(main())
    calls = sum(nvml.calls.values())
    print(json.dumps({"nvml_calls": calls, "polls": agent.polls, "readings": agent.readings_seen}))


def child_poll_timing() -> None:
    """Time the agent's poll alone: every reading of every GPU, ``POLLS`` times."""
    from resurrect.sensors.node_agent.nvml_source import NvmlSource

    source = NvmlSource(nvml_for(os.environ.get("AGENT_OVERHEAD_NVML", "fake")))
    status = source.open()
    readings = len(source.poll())  # the first poll (NVLink link discovery) is not timed
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(POLLS):
        source.poll()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(
        json.dumps(
            {
                "gpus": len(source.gpus),
                "driver": status.driver,
                "readings_per_poll": readings,
                "poll_wall_ms": round(1000 * wall / POLLS, 3),
                "poll_cpu_ms": round(1000 * cpu / POLLS, 3),
            }
        )
    )
    signal.sigwait({signal.SIGTERM})


POLLS = 200
CHILDREN = {
    "idle": child_idle,
    "idle_imports": child_idle_imports,
    "agent": child_agent,
    "poll_timing": child_poll_timing,
}


# -- the measurement ---------------------------------------------------------------------


def measure(duration: float, warmup: float, nvml: str = "fake") -> dict[str, object]:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "AGENT_OVERHEAD_NVML": nvml}
    names = [n for n in CHILDREN if nvml == "real" or n != "poll_timing"]
    procs = {
        name: subprocess.Popen(
            [sys.executable, __file__, "--child", name],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in names
    }
    time.sleep(warmup)
    start_wall = time.monotonic()
    start_cpu = {name: cpu_seconds(p.pid) for name, p in procs.items()}
    peak = {name: rss_mib(p.pid) for name, p in procs.items()}
    while time.monotonic() - start_wall < duration:
        time.sleep(0.5)
        for name, p in procs.items():
            peak[name] = max(peak[name], rss_mib(p.pid))
    wall = time.monotonic() - start_wall
    end_cpu = {name: cpu_seconds(p.pid) for name, p in procs.items()}
    end_rss = {name: rss_mib(p.pid) for name, p in procs.items()}
    results: dict[str, object] = {}
    for name, p in procs.items():
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=30)
        used = end_cpu[name] - start_cpu[name]
        entry: dict[str, object] = {
            "cpu_percent": round(100 * used / wall, 3),
            "cpu_seconds": round(used, 3),
            "rss_mib": round(end_rss[name], 1),
            "rss_peak_mib": round(peak[name], 1),
        }
        if out.strip():
            extra = json.loads(out.strip().splitlines()[-1])
            entry.update(extra)
            if "nvml_calls" in extra:
                entry["nvml_calls_per_s"] = round(extra["nvml_calls"] / (wall + warmup), 1)
        results[name] = entry
    agent, idle, imports = results["agent"], results["idle"], results["idle_imports"]
    assert isinstance(agent, dict) and isinstance(idle, dict) and isinstance(imports, dict)
    timing = results.get("poll_timing")
    return {
        "nvml": nvml,
        "gpus": timing["gpus"] if isinstance(timing, dict) else 8,
        "interval_s": 5.0,
        "heartbeat_interval_s": 2.0,
        "window_s": round(wall, 1),
        "processes": results,
        "agent_over_idle": {
            "cpu_percent": round(agent["cpu_percent"] - idle["cpu_percent"], 3),
            "rss_mib": round(agent["rss_mib"] - idle["rss_mib"], 1),
            "rss_mib_over_idle_imports": round(agent["rss_mib"] - imports["rss_mib"], 1),
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=30.0, help="measured window (s)")
    parser.add_argument("--warmup", type=float, default=4.0, help="start-up to skip (s)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line")
    parser.add_argument(
        "--nvml", choices=["fake", "real"], default="fake", help="8 fake GPUs or this machine's"
    )
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        CHILDREN[args.child]()
        return 0
    result = measure(args.duration, args.warmup, args.nvml)
    if args.json:
        print(json.dumps(result))  # one line, like the other benchmarks
    else:
        for name, entry in result["processes"].items():  # type: ignore[attr-defined]
            print(f"{name:13} cpu {entry['cpu_percent']:6.2f}%  rss {entry['rss_mib']:6.1f} MiB")
        print(f"agent over idle: {result['agent_over_idle']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
