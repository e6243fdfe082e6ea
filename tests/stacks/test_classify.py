"""Victims and culprits from real py-spy output of a hung gloo job (and constructed NCCL-style
dumps, labelled so): see tests/fixtures/stacks/README.md."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from resurrect.stacks.classify import RankStack, judge, place_of
from resurrect.stacks.flight_recorder import LastCollective
from resurrect.stacks.pyspy_text import parse_pyspy_dump

FIXTURES = Path(__file__).parent.parent / "fixtures" / "stacks"


def rank(name: str, rank: int, state: str = "S", node: str = "node1") -> RankStack:
    text = (FIXTURES / name).read_text()
    dump = parse_pyspy_dump(text)
    assert dump.pid is not None
    return RankStack(rank, node, dump.pid, state, dump, text)


def test_the_parser_reads_threads_and_frames_innermost_first() -> None:
    dump = parse_pyspy_dump((FIXTURES / "gloo-ddp-victim-rank0-native.txt").read_text())
    main = dump.main_thread()
    assert dump.pid == 9002 and main is not None and main.name == "MainThread"
    assert main.frames[1].function == "pthread_cond_wait" and main.frames[1].native
    assert str(main.frames[-3]) == "main (train.py:248)" and not main.frames[-3].native


def test_ddp_ranks_waiting_for_the_gloo_all_reduce_are_victims() -> None:
    place = place_of(rank("gloo-ddp-victim-rank0-native.txt", 0))
    assert place.place == "collective" and "Reducer::finalize_backward" in place.frame


def test_a_python_only_dump_inside_backward_is_not_taken_for_a_collective() -> None:
    # without native frames, waiting for DDP's all-reduce looks like computing the backward
    assert place_of(rank("gloo-ddp-victim-rank0.txt", 0)).place == "elsewhere"


def test_a_stopped_rank_is_the_culprit_of_the_ddp_hang() -> None:
    verdict = judge(
        [
            rank("gloo-ddp-victim-rank0-native.txt", 0),
            rank("gloo-ddp-stopped-rank1-nonblocking.txt", 1, state="T", node="node2"),
            rank("gloo-ddp-victim-rank2-native.txt", 2),
        ]
    )
    assert [v.rank for v in verdict.victims] == [0, 2]
    [culprit] = verdict.culprits
    assert (culprit.rank, culprit.node, culprit.place) == (1, "node2", "stopped")
    assert culprit.frame == "main (train.py:269)"
    assert "rank 1 on node2 (stopped" in verdict.summary


def test_a_plain_all_reduce_loop_with_one_rank_stopped_in_sleep() -> None:
    verdict = judge(
        [
            rank("gloo-allreduce-victim.txt", 0),
            rank("gloo-allreduce-stopped-nonblocking.txt", 1, state="T"),
        ]
    )
    assert verdict.victims[0].frame.startswith("all_reduce (torch/distributed/distributed_c10d.py")
    assert [c.rank for c in verdict.culprits] == [1]


def test_nccl_style_victim_and_data_loader_culprit_constructed() -> None:
    verdict = judge(
        [
            rank("nccl-victim-barrier-CONSTRUCTED.txt", 0),
            rank("nccl-culprit-dataloader-CONSTRUCTED.txt", 1, node="gpu-7"),
        ]
    )
    assert verdict.victims[0].place == "collective"
    [culprit] = verdict.culprits
    assert (culprit.place, culprit.node) == ("dataloader", "gpu-7")


def test_a_rank_stuck_in_a_cuda_sync_beats_a_merely_busy_one_constructed() -> None:
    busy = rank("gloo-ddp-victim-rank0.txt", 2)  # python-only: "elsewhere"
    verdict = judge(
        [
            rank("nccl-victim-barrier-CONSTRUCTED.txt", 0),
            rank("nccl-culprit-cuda-sync-CONSTRUCTED.txt", 1),
            busy,
        ]
    )
    assert [(c.rank, c.place) for c in verdict.culprits] == [(1, "cuda"), (2, "elsewhere")]


def test_all_ranks_waiting_name_no_culprit() -> None:
    verdict = judge(
        [
            rank("gloo-ddp-victim-rank0-native.txt", 0),
            rank("gloo-ddp-victim-rank2-native.txt", 2),
        ]
    )
    assert not verdict.culprits and "no culprit" in verdict.summary


def test_a_dump_that_failed_leaves_the_rank_unknown_not_guilty() -> None:
    text = (FIXTURES / "stopped-process-blocking-error.txt").read_text()
    dump = parse_pyspy_dump(text)
    assert dump.threads == []
    failed = RankStack(1, "node2", 8524, "S", dump, text)
    verdict = judge([rank("gloo-allreduce-victim.txt", 0), failed])
    assert verdict.places[1].place == "unknown" and not verdict.culprits
    assert verdict.ranks_seen == 1


def test_a_rank_that_is_not_running_at_all_is_not_judged_from_stacks() -> None:
    victim = rank("gloo-ddp-victim-rank0-native.txt", 0)
    alone = RankStack(victim.rank, victim.node, victim.pid, "S", victim.dump, world_size=2)
    verdict = judge([alone])
    assert verdict.missing == [1] and not verdict.culprits and not verdict.victims
    assert "lost node or a crashed process" in verdict.summary


def nccl_rank_in_cuda_sync(rank_number: int, last_seq: int) -> RankStack:
    """CONSTRUCTED: an NCCL rank whose main thread is in a CUDA synchronisation, with a
    CONSTRUCTED Flight Recorder record of its last collective."""
    stack = rank("nccl-culprit-cuda-sync-CONSTRUCTED.txt", rank_number, node=f"gpu-{rank_number}")
    last = LastCollective(rank_number, "0", last_seq, "nccl:all_reduce", "started")
    return replace(stack, pid=1000 + rank_number, collectives=(last,))


def test_flight_recorder_names_the_culprit_when_the_stacks_confirm_nothing() -> None:
    only_stacks = judge([replace(nccl_rank_in_cuda_sync(r, 1), collectives=()) for r in range(3)])
    assert not only_stacks.victims and not only_stacks.culprits  # NCCL: every rank in a sync
    verdict = judge([nccl_rank_in_cuda_sync(0, 12), nccl_rank_in_cuda_sync(1, 11),
                     nccl_rank_in_cuda_sync(2, 12)])  # fmt: skip
    [culprit] = verdict.culprits
    assert (culprit.rank, culprit.node, culprit.place) == (1, "gpu-1", "behind")
    assert "#11" in culprit.frame and "#12 (nccl:all_reduce)" in culprit.frame
    assert [v.rank for v in verdict.victims] == [0, 2]
    assert "2 rank(s) wait for rank 1 on gpu-1" in verdict.summary


def test_flight_recorder_all_even_confirms_nothing() -> None:
    verdict = judge([nccl_rank_in_cuda_sync(r, 12) for r in range(3)])
    assert not verdict.victims and not verdict.culprits
