"""Flight Recorder dumps: the rank behind its peers' last collective is the culprit."""

from __future__ import annotations

from pathlib import Path

from resurrect.stacks.flight_recorder import lagging_ranks, read_flight_record

FIXTURES = Path(__file__).parent.parent / "fixtures" / "flight_recorder"


def test_the_rank_that_never_entered_the_collective_lags() -> None:
    records = [
        r for rank in range(3) for r in read_flight_record(FIXTURES / f"rank{rank}.json", rank)
    ]
    assert [(r.rank, r.seq, r.state) for r in records] == [
        (0, 42, "started"),
        (1, 42, "started"),
        (2, 41, "completed"),
    ]
    assert lagging_ranks(records) == {"0": [2]}


def test_a_pickle_or_garbage_is_never_read(tmp_path: Path) -> None:
    pickled = tmp_path / "rank0"
    pickled.write_bytes(b"\x80\x04\x95cos\nsystem\n")
    assert read_flight_record(pickled, 0) == []
    broken = tmp_path / "rank1"
    broken.write_text('{"entries": [{"collective_seq_id": "x"}, 7]')
    assert read_flight_record(broken, 1) == []
