"""Reading, from Slurm's own lines in a job's output, the attempts that an earlier attempt's
srun ended (benchmarks/chaos/leftovers.py)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.chaos.leftovers import leftover_cancellations, read_leftover_cancellations

# job 5 of the 2.5-minute host soak (seed 51): node3 froze under attempt 0 and thawed
# while attempt 1 ran on node5
THAWED = """\
[rank0] checkpoint /ckpt/step_40
srun: error: Node failure on node3
srun: Job step aborted: Waiting up to 4 seconds for job step to finish.
srun: Job step aborted: Waiting up to 4 seconds for job step to finish.
slurmstepd-node5: error: *** STEP 5.0 ON node5 CANCELLED AT 2026-12-04T05:11:30 ***
slurmstepd-node3: error: *** JOB 5 ON node3 CANCELLED AT 2026-12-04T05:11:30 DUE TO NODE \
FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***
srun: error: node5: task 0: Killed
"""


def test_a_step_of_another_node_cancelled_right_after_a_node_failure_is_a_leftovers_doing() -> None:
    assert leftover_cancellations(THAWED) == [("node3", "node5")]


def test_a_node_failure_that_ends_the_nodes_own_step_is_no_leftover() -> None:
    own = (
        "srun: error: Node failure on node3\n"
        "slurmstepd-node3: error: *** STEP 5.0 ON node3 CANCELLED AT 2026-12-04T05:11:30 ***\n"
    )
    assert leftover_cancellations(own) == []


def test_a_cancellation_far_from_any_node_failure_is_no_leftover() -> None:
    far = "srun: error: Node failure on node3\n" + "step\n" * 10 + THAWED.splitlines()[4]
    assert leftover_cancellations(far) == []
    assert (
        leftover_cancellations("*** STEP 5.0 ON node5 CANCELLED AT 2026-12-04T05:11:30 ***") == []
    )


def test_an_output_that_cannot_be_read_has_none(tmp_path: Path) -> None:
    assert read_leftover_cancellations(tmp_path / "missing.out") == []
    out = tmp_path / "job.out"
    out.write_text(THAWED)
    assert read_leftover_cancellations(out) == [("node3", "node5")]
