"""`unknown` only when nothing in the log says more: a fatal-looking line no rule has a class
for is shown as the decisive-looking line ("no rule for this wording"), in the summary, in
`--explain` and in its JSON, and its shape is what the unknown metric counts."""

from __future__ import annotations

from resurrect.contracts import Diagnosis, Evidence, FaultClass, RecoveryAction
from resurrect.rules import diagnose_lines, load_engine
from resurrect.rules.attribution import weigh
from resurrect.rules.explain import explanation_of
from resurrect.rules.unrecognised import (
    MAX_SHAPE_CHARS,
    UNRECOGNISED_RULE,
    fatal_shape,
    first_unrecognised,
    unknown_shape,
)

ENGINE = load_engine()

UNTAUGHT = """
step 1200 loss 2.31
Traceback (most recent call last):
  File "train.py", line 88, in <module>
    trainer.fit()
mindspore._c_expression.KernelBuildFailure: build failed for kernel Conv2D-op7
"""


def lines(text: str) -> list[str]:
    return text.strip("\n").splitlines()


def diag(text: str) -> Diagnosis:
    return diagnose_lines(lines(text), file="job.log", engine=ENGINE)


def test_an_untaught_fatal_line_is_named_in_the_unknown_diagnosis() -> None:
    d = diag(UNTAUGHT)
    assert d.fault_class is FaultClass.UNKNOWN
    assert d.summary.startswith("unknown: no rule for this wording: job.log:5: ")
    assert "KernelBuildFailure" in d.summary
    assert d.evidence[0].rule == UNRECOGNISED_RULE
    assert unknown_shape(d) == "exception:KernelBuildFailure"


def test_unknown_stays_conservative_it_restarts_and_drains_nothing() -> None:
    d = diag(UNTAUGHT)
    assert d.action is RecoveryAction.RESTART
    assert d.culprit_hosts == []


def test_explain_shows_the_decisive_looking_line_and_what_would_teach_it() -> None:
    evidence = ENGINE.scan_lines(lines(UNTAUGHT), file="job.log")
    explanation = explanation_of(weigh(evidence), ENGINE.packs())
    text = "\n".join(explanation.lines())
    assert (
        "decisive-looking line at job.log:5 - no rule for this wording "
        "(exception:KernelBuildFailure)" in text
    )
    assert "a rule for the wording of exception:KernelBuildFailure" in text
    assert explanation.as_json()["unrecognised"]["shape"] == "exception:KernelBuildFailure"
    assert explanation.as_json()["unrecognised"]["line"] == 5


def test_a_fatal_line_beats_an_earlier_error_level_log_line() -> None:
    d = diag("""
E0101 10:00:00.000001 12 client.cc:40] Connection attempt 1 failed, retrying
F0101 10:00:09.000001 12 plugin.cc:77] Failed to load the device plugin
""")
    assert unknown_shape(d) == "fatal-log:plugin.cc"


def test_an_error_level_log_line_is_named_when_nothing_looks_fatal() -> None:
    d = diag("E0101 10:00:00.000001 12 local_client.cc:672] Execution of replica 0 failed: boom")
    assert unknown_shape(d) == "error-log:local_client.cc"


def test_nothing_fatal_looking_says_so() -> None:
    d = diag("step 1 loss 3.2\nstep 2 loss 3.1")
    assert d.summary == "unknown: no rule matched a failure"
    assert unknown_shape(d) == "none"


def test_a_taught_failure_is_decided_and_has_no_unknown_shape() -> None:
    d = diag("Traceback (most recent call last):\nKeyError: 'labels'")
    assert d.fault_class is FaultClass.APP_ERROR
    assert unknown_shape(d) is None


def test_shapes_are_short_and_safe_label_values() -> None:
    long_name = "A" * 70 + "Error"
    evidence = ENGINE.scan_lines([f"pkg.{long_name}: x", 'go: panic("x")'], file="j.log")
    line = first_unrecognised(evidence)
    assert line is not None
    assert len(fatal_shape(line)) <= MAX_SHAPE_CHARS
    odd = Evidence(kind=line.kind, text="x", rule=UNRECOGNISED_RULE, fields={"source": "a b/c"})
    assert fatal_shape(odd) == "fatal-log:a_b_c"
