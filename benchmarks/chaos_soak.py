"""Chaos soak: resurrect on a live Slurm cluster under seeded overlapping faults.

    python benchmarks/chaos_soak.py --minutes M --seed S [--slurm VER] [--hosts netns] [--json]

Needs root, Slurm, the Temporal dev server and torch (what the end-to-end tests need). The
same seed injects the same fault kinds at the same offsets; the result names the seed and
the commit, each invariant with its count of violations, and the figures (faults by kind,
detected / recovered / left-alone shares, detect and recover p50/p95 by kind, false drains,
lost jobs, goodput of faulted jobs against fault-free ones). docs/chaos-soak.md explains it.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from _common import benchmark_parser, print_result

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.chaos.jobs import shapes_named
from benchmarks.chaos.schedule import kinds_named
from benchmarks.chaos.soak import SoakSettings, run_soak
from resurrect.demo.host_namespaces import namespaces_unavailable_reason
from resurrect.demo.local_cluster import slurm_unavailable_reason


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--slurm", default=None, help="Slurm version (default: the host's)")
    parser.add_argument("--nodes", type=int, default=6)
    parser.add_argument("--kinds", default=None, help="comma-separated fault kinds (default all)")
    parser.add_argument("--mean-gap-s", type=float, default=20.0)
    parser.add_argument("--state-dir", type=Path, default=None)
    parser.add_argument(
        "--shapes", default=None, help="comma-separated job shapes to keep running (default all)"
    )
    parser.add_argument(
        "--hosts", choices=("local", "netns"), default="local",
        help="netns: each node its own network namespace (partitions, frozen and crashed"
        " hosts, lossy links; fencing on)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    reason = slurm_unavailable_reason(args.slurm)
    if reason is None and args.hosts == "netns":
        reason = namespaces_unavailable_reason()
    if reason is not None:
        print(f"chaos_soak: {reason}", file=sys.stderr)
        return 2
    settings = SoakSettings(
        minutes=args.minutes, seed=args.seed, nodes=args.nodes, slurm_version=args.slurm,
        state_dir=args.state_dir, mean_gap_s=args.mean_gap_s, hosts=args.hosts,
    )  # fmt: skip
    if args.kinds:
        settings.kinds = kinds_named(args.kinds.split(","))
    if args.shapes:
        settings.shapes = shapes_named(args.shapes.split(","))
    # the result alone on stdout: what the soak's parts log (the Temporal SDK's core writes
    # its warnings to file descriptor 1) goes to stderr
    sys.stdout.flush()
    result_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    result = asyncio.run(run_soak(settings, lambda m: print(f"[chaos] {m}", file=sys.stderr)))
    sys.stdout = result_out
    print_result(
        result,
        as_json=args.json,
        summary=f"{result['violations']} invariant violations over {result['minutes']} min",
    )
    result_out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
