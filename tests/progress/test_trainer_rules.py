"""The shipped progress rules read the step lines of common trainers, as their examples say."""

from __future__ import annotations

from pathlib import Path

import pytest

from resurrect.errors import RuleError
from resurrect.progress.loader import load_progress_pack, load_progress_rules
from resurrect.progress.parser import ProgressParser, check_rules, shipped_parser


def test_every_shipped_rule_meets_its_examples() -> None:
    rules = load_progress_rules()
    assert len(rules) >= 10
    assert check_rules(rules) == []


def test_the_example_jobs_lines_give_step_total_and_rank() -> None:
    event = shipped_parser().parse(b"[rank3]: [rank3] step 40/120 loss 0.4214\n")
    assert event is not None
    assert (event.step, event.total, event.rank, event.phase) == (40, 120, 3, "train")


def test_megatron_step_time_is_read_in_seconds() -> None:
    line = (
        " iteration      100/  1000 | consumed samples: 3200 |"
        " elapsed time per iteration (ms): 1234.5 | lm loss: 6.1E+00 |"
    )
    event = shipped_parser().parse(line)
    assert event is not None and event.rule == "megatron.iteration"
    assert event.step == 100 and event.step_time_s == pytest.approx(1.2345)


def test_a_redrawn_tqdm_bar_counts_by_its_last_state() -> None:
    line = " 1%|| 5/500 [00:01<01:39,  5.00it/s]\r 1%|| 6/500 [00:01<01:38,  4.00it/s]"
    event = shipped_parser().parse(line)
    assert event is not None and event.step == 6 and event.step_time_s == pytest.approx(0.25)


def test_save_and_evaluation_lines_mark_their_phase() -> None:
    parser = shipped_parser()
    save = parser.parse("saving checkpoint at iteration     200 to /ckpt in torch_dist format")
    evaluation = parser.parse("[INFO|trainer.py:4289] >> ***** Running Evaluation *****")
    assert save is not None and save.phase == "checkpoint"
    assert evaluation is not None and evaluation.phase == "eval"


@pytest.mark.parametrize(
    "line",
    [
        "[rank0] world 2, steps 1..120, restart count 0",
        "NCCL INFO Channel 00/02 : 0 1",
        "x" * 100_000 + " step 5 loss 1.0",  # cut to the bounded head: no step in it
        b"\xff\xfe step \x00 garbage",
    ],
)
def test_other_lines_are_not_progress(line: str | bytes) -> None:
    assert shipped_parser().parse(line) is None


def test_a_rule_with_an_unknown_group_is_rejected_naming_it(tmp_path: Path) -> None:
    pack = tmp_path / "bad.yaml"
    pack.write_text(
        "pack: bad\nrules:\n  - id: bad.rule\n    trainer: x\n    literal: [step]\n"
        "    pattern: 'step (?P<epoch>\\d+)'\n    examples: {match: ['step 1']}\n"
    )
    with pytest.raises(RuleError, match=r"bad\.rule.*epoch"):
        load_progress_pack(pack)


def test_a_rule_that_misses_its_example_is_reported(tmp_path: Path) -> None:
    pack = tmp_path / "p.yaml"
    pack.write_text(
        "pack: p\nrules:\n  - id: p.rule\n    trainer: x\n    literal: [step]\n"
        "    pattern: 'step (?P<step>\\d+)'\n"
        "    examples: {match: [{text: 'step 7', step: 8}], no_match: ['step 9']}\n"
    )
    problems = check_rules(load_progress_pack(pack).rules)
    assert any("step 7" in p and "!= 8" in p for p in problems)
    assert any("no-match" in p for p in problems)
    assert ProgressParser(load_progress_pack(pack).rules).parse("step 3") is not None
