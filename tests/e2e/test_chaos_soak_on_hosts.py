"""A short seeded chaos soak on hosts in namespaces (benchmarks/chaos_soak.py --hosts netns):
a node cut off with its ranks alive, a frozen host, a crashed host, a partition shorter than
the grace, and not one invariant broken (no job running twice, no stale checkpoint write, a
healed node back only through the repair workflow, no false drain).

The soak runs as its own process: it moves itself onto the controller's network namespace,
which this test process must not do."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.requirements import missing

from resurrect.demo.host_namespaces import namespaces_unavailable_reason
from resurrect.demo.local_cluster import slurm_unavailable_reason

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.torch, pytest.mark.long_running]

REPO = Path(__file__).resolve().parents[2]
# The suite's slice: short, seeded, the host faults that need a recovery and one that must
# not drain; two job shapes keep the end (every job finished) short.
# Seed 1717 draws a host crash at +47 s, a freeze at +61 s, a partition at +73 s and a short
# partition at +89 s: far enough apart that five nodes leave each a running job to hit (seed
# 114 put its partition 15 s after the crash, while the hit jobs were still being requeued,
# and it found no running job).
SLICE = [
    "--minutes", "2.0", "--seed", "1717", "--nodes", "5", "--hosts", "netns",
    "--mean-gap-s", "15", "--kinds", "partition,host_freeze,host_crash,partition_short",
    "--shapes", "torchrun-2n,srun-1n",
]  # fmt: skip
# Broken on hosts under load, still open (docs/chaos-soak.md): a job requeued more often than faults
# hit it (at load 15, job 1's attempts on a node that had just rejoined after a partition
# failed twice, their ranks SIGKILLed by no fence), and a recovery of such a re-failed
# attempt still running when the slice ends. One cause is found: an earlier attempt's srun,
# thawed or healed, cancels the new attempt's step of the same number (seen alone on 2
# cores, 2026-12-04); the soak counts such an attempt against the fault from Slurm's own
# lines (benchmarks/chaos/leftovers.py) and resurrect diagnoses it as that node's loss.
# Whether it was the only cause is not known, so both stay reported as an expected failure;
# any other invariant broken (running twice, stale writes, false drains) fails.
OPEN_ON_HOSTS = {"one_requeue_per_fault", "recoveries_end"}
# the invariants this slice is about (all must hold; these must have been exercised)
HOST_INVARIANTS = {
    "no_job_running_twice",
    "no_stale_checkpoint_write",
    "healed_node_returned_by_repair",
    "no_false_drain",
}


def test_a_seeded_soak_on_hosts_in_namespaces_breaks_no_invariant(tmp_path: Path) -> None:
    reason = slurm_unavailable_reason() or namespaces_unavailable_reason()
    if reason is not None:
        missing(reason)
    state = Path("/tmp") / f"resurrect-chaos-hosts-{tmp_path.name}"
    try:
        done = subprocess.run(
            [sys.executable, str(REPO / "benchmarks" / "chaos_soak.py"), *SLICE, "--json",
             "--state-dir", str(state)],
            capture_output=True, text=True, timeout=1200, check=False, cwd=REPO,
        )  # fmt: skip
    finally:
        shutil.rmtree(state, ignore_errors=True)
    sys.stderr.write(done.stderr[-4000:])
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # (rss_stable compares RSS from a third of the run on: in 2 minutes that is start-up;
    # the suite's other soak and the benchmarks keep it)
    broken = [
        line
        for line in result["invariants"]
        if line["violations"] and line["invariant"] != "rss_stable"
    ]
    assert HOST_INVARIANTS <= {line["invariant"] for line in result["invariants"]}
    assert result["hosts"] == "netns"
    assert sum(result["faults_by_kind"].values()) >= 3, result["skipped_by_kind"]
    print(
        f"\nchaos soak on hosts, seed 1717: {result['faults_by_kind']}, detect {result['detect_s']},"
        f" fence {result['fence_s']}, recover {result['recover_s']}"
    )
    assert [line for line in broken if line["invariant"] not in OPEN_ON_HOSTS] == [], broken
    if broken:
        pytest.xfail(f"open on loaded hosts (docs/chaos-soak.md): {broken}")
