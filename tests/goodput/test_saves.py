"""Save times and save spacing read from the lines trainers print around their saves."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from resurrect.contracts import JobInfo, JobState
from resurrect.goodput.accounting import account_job
from resurrect.goodput.collect import build_record
from resurrect.goodput.progress import parse_progress
from resurrect.goodput.saves import save_times

T0 = datetime(2026, 11, 30, 6, 0, 0, tzinfo=UTC)


def stamp(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat(timespec="milliseconds")


def example_job_lines() -> list[str]:
    """The example job: a step a second, logged every 10, a 3 s save every 20 steps."""
    lines = [f"[rank0] no intact checkpoint: starting from scratch t={stamp(0)}"]
    clock = 0.0
    for step in range(1, 61):
        clock += 1
        if step % 10 == 0 or step == 1:
            lines.append(f"[rank0] step {step}/60 loss 0.1 t={stamp(clock)}")
        if step % 20 == 0:
            clock += 3
            lines.append(f"[rank0] checkpoint /ckpt/step_{step} t={stamp(clock)}")
    return lines


def test_the_example_jobs_saves_are_timed_from_the_step_line_to_the_checkpoint_line() -> None:
    progress = parse_progress(example_job_lines())
    assert [(s.step, s.done) for s in progress.saves] == [(20, True), (40, True), (60, True)]
    assert [m.step for m in progress.marks][:3] == [1, 10, 20]  # step_20 is not a mark
    times = save_times(progress.saves, progress.marks, [], 1.0)
    assert times.save_s == 3.0 and times.measured == 3
    assert times.every_s == 23.0  # 20 steps of 1 s and one 3 s save


def test_start_and_done_lines_and_a_stated_duration() -> None:
    lines = [
        f"[rank0] saving checkpoint at iteration 100 to /ckpt in torch_dist format t={stamp(10)}",
        f"[rank0] successfully saved checkpoint from iteration 100 to /ckpt t={stamp(17.5)}",
        f"Finished saving the checkpoint (or staging if async is enabled)in 2.50 seconds."
        f" t={stamp(600)}",
        f"[rank3] saving checkpoint at iteration 200 t={stamp(601)}",  # not rank 0
    ]
    progress = parse_progress(lines)
    assert [(s.done, s.step, s.stated_s) for s in progress.saves] == [
        (False, 100, None),
        (True, 100, None),
        (True, None, 2.5),
    ]
    assert save_times(progress.saves, [], [], None).save_s == 5.0  # median of 7.5 and 2.5


def test_a_save_between_logged_steps_is_moved_on_by_the_step_time() -> None:
    lines = [
        f"[rank0] step 10/60 t={stamp(10)}",
        f"[rank0] checkpoint /ckpt/step_15 t={stamp(17)}",  # steps 11..15 took 5 s
    ]
    progress = parse_progress(lines)
    assert save_times(progress.saves, progress.marks, [], 1.0).save_s == 2.0
    assert save_times(progress.saves, progress.marks, [], None).save_s is None


def test_a_restart_between_two_saves_is_not_a_checkpoint_interval() -> None:
    lines = example_job_lines()
    progress = parse_progress(lines)
    resumed = [T0 + timedelta(seconds=30)]  # between the saves at 23 s and 46 s
    assert save_times(progress.saves, progress.marks, resumed, 1.0).every_s == 23.0
    assert save_times(progress.saves[:2], progress.marks, resumed, 1.0).every_s is None


def test_the_accounted_job_carries_its_save_times_and_node_count() -> None:
    info = JobInfo(
        job_id="7", state=JobState.RUNNING, start_time=T0, nodes=["node1", "node2"], num_nodes=2
    )
    record = build_record("c", "7", info, [], parse_progress(example_job_lines()))
    job = account_job(record, T0 + timedelta(hours=1))
    assert (job.save_s, job.checkpoint_every_s, job.saves_measured) == (3.0, 23.0, 3)
    assert job.nodes == 2


@settings(max_examples=120, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(max_size=200),
            st.builds(
                lambda head, step, seconds, at: f"{head} step_{step} in {seconds} seconds t={at}",
                st.sampled_from(
                    ["[rank0] checkpoint /c/", "saving checkpoint at iteration", "saved checkpoint"]
                ),
                st.integers(min_value=0, max_value=10**12),
                st.floats(min_value=0, max_value=1e9, allow_nan=False),
                st.sampled_from([stamp(0), stamp(-5), stamp(1e6), "2026-99-99T00:00:00Z"]),
            ),
        ),
        max_size=40,
    )
)
def test_hostile_save_lines_never_raise_nor_give_negative_times(lines: list[str]) -> None:
    progress = parse_progress(lines)
    times = save_times(progress.saves, progress.marks, [], 0.5)
    assert times.save_s is None or times.save_s >= 0
    assert times.every_s is None or times.every_s > 0
