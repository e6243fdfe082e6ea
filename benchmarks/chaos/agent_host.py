"""One node's agent as the soak runs it: ``resurrect agent run`` (the production code path:
its reporters, its liveness heartbeats, its stack probes) over simulated GPUs.

    python benchmarks/chaos/agent_host.py --config FILE --node NODE

The local cluster's nodes have no GPUs: the agent reads a :class:`FakeNvml` with two GPUs
instead of the host's NVML. ``SIGUSR1`` makes GPU 0 raise Xid 48 (a double-bit ECC error),
what a failing GPU's NVML reports; the soak sends it with a fatal GPU line in a job's output.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from resurrect.command_line import exit_now
from resurrect.sensors.node_agent import FakeNvml
from resurrect.sensors.node_agent import cli as agent_cli

XID_DOUBLE_BIT_ECC = 48


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--config", required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args(argv)
    args.no_kernel_log = True
    nvml = FakeNvml.with_gpus(2)
    agent_cli.load_pynvml = lambda: nvml  # type: ignore[attr-defined]
    settings, config = agent_cli._settings(args)
    engine = agent_cli._engine(config)

    async def serve() -> int:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGUSR1, nvml.emit_xid, 0, XID_DOUBLE_BIT_ECC)
        return await agent_cli._serve(settings, config, engine, print_only=False)

    exit_now(asyncio.run(serve()))


if __name__ == "__main__":
    sys.exit(main())
