"""What-if simulator cost: a month of a 1,000-node cluster, against a month of 100 nodes.

A synthetic recorded period (seeded): the cluster is cut into blocks of 8 to 128 nodes
filling 90 % of it, each block running jobs of 1 to 6 days of training back to back, saving
every 30 min (60 s saves); interruptions at 2.5e-4 per node-hour over four classes (about
the rate of large published training runs), times ``--rate-scale``; detection, recovery,
queue and start-up drawn from recorded-looking samples. One call of ``simulate`` runs the
three scenarios (recorded, what-if, manual) ``--replications`` times each. Reported: the
seconds for the 1,000-node month, for the 100-node month (the baseline, same run), their
ratio, and the interruptions simulated.

    python benchmarks/simulate_cost.py [--nodes 1000] [--replications 8] [--rate-scale 1] [--json]
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import benchmark_parser, print_result

from resurrect.goodput.simulate.model import SimInputs, SimJob, WhatIf
from resurrect.goodput.simulate.run import DEFAULT_REPLICATIONS, simulate

DAY = 86400.0
MONTH = 30 * DAY
RATES = {"gpu.hardware": 1e-4, "network.fabric": 5e-5, "node.lost": 5e-5, "process.crash": 5e-5}
SAMPLES = {
    "detection": [2.0, 5.0, 8.0, 30.0, 90.0],
    "recovery": [20.0, 35.0, 60.0, 120.0],
    "queue": [5.0, 30.0, 120.0, 600.0],
    "startup": [60.0, 120.0, 300.0],
}


def cluster(nodes: int, rate_scale: float, seed: int) -> SimInputs:
    rng = random.Random(seed)
    jobs: list[SimJob] = []
    used = 0
    block = 0
    while True:
        size = rng.choice([8, 16, 32, 64, 128])
        if used + size > 0.9 * nodes:
            break
        used += size
        submit = 0.0
        while submit < MONTH:
            work = rng.uniform(1, 6) * DAY
            jobs.append(
                SimJob(
                    job_id=f"{block}.{len(jobs)}",
                    nodes=size,
                    submit_s=submit,
                    work_s=work,
                    checkpoint_interval_s=1800,
                    save_s=60,
                )
            )
            submit += work
        block += 1
    return SimInputs(
        cluster_nodes=nodes,
        period_s=MONTH,
        jobs=jobs,
        rates_per_node_hour={k: v * rate_scale for k, v in RATES.items()},
        samples_s=SAMPLES,  # type: ignore[arg-type]
        drain_budget=max(1, nodes // 100),
    )


def timed(inputs: SimInputs, replications: int) -> tuple[float, int, float | None]:
    knobs = WhatIf(detect_s=10, checkpoint_interval_s=1200, spares=8)
    started = time.perf_counter()
    result = simulate(inputs, knobs, seed=1, replications=replications)
    seconds = time.perf_counter() - started
    faults = sum(s.interruptions for s in result.scenarios) * replications
    return seconds, faults, result.scenarios[0].goodput


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--baseline-nodes", type=int, default=100)
    parser.add_argument("--replications", type=int, default=DEFAULT_REPLICATIONS)
    parser.add_argument("--rate-scale", type=float, default=1.0)
    args = parser.parse_args(argv)
    big = cluster(args.nodes, args.rate_scale, seed=7)
    small = cluster(args.baseline_nodes, args.rate_scale, seed=7)
    big_s, big_faults, big_goodput = timed(big, args.replications)
    small_s, small_faults, _ = timed(small, args.replications)
    result = {
        "benchmark": "simulate_cost",
        "nodes": args.nodes,
        "jobs": len(big.jobs),
        "scenarios": 3,
        "replications": args.replications,
        "month_s": round(big_s, 3),
        "interruptions_simulated": big_faults,
        "recorded_goodput": big_goodput,
        "baseline_nodes": args.baseline_nodes,
        "baseline_month_s": round(small_s, 3),
        "baseline_interruptions": small_faults,
        "ratio_vs_baseline": round(big_s / small_s, 2) if small_s > 0 else None,
    }
    print_result(result, as_json=args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
