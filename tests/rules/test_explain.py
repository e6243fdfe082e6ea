"""``explain``: the rule that fired, why the other candidates lost, what would change it."""

from __future__ import annotations

from resurrect.contracts import FaultClass
from resurrect.rules import diagnose_lines, load_engine
from resurrect.rules.explain import Explanation, explain

ENGINE = load_engine()


def explain_text(text: str) -> Explanation:
    evidence = ENGINE.scan_lines(text.strip("\n").splitlines(), file="job.log")
    return explain(evidence, engine=ENGINE)


XID79_AND_TIMEOUTS = """
[rank0]:[E1206 18:44:12.7 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600061 milliseconds before timing out.
Nov 29 19:00:00 gpu-node-02 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.
[rank1]:[E1206 18:44:12.7 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600061 milliseconds before timing out.
"""


def test_names_the_rule_that_fired_with_pack_and_line() -> None:
    e = explain_text(XID79_AND_TIMEOUTS)
    assert e.fault_class is FaultClass.GPU_HARDWARE and e.decided_by == "root"
    assert e.fired is not None
    assert (e.fired.pack, e.fired.rule, e.fired.file, e.fired.line) == (
        "xid",
        "xid.fallen_off_bus",
        "job.log",
        2,
    )


def test_a_cascade_loses_as_a_cascade() -> None:
    e = explain_text(XID79_AND_TIMEOUTS)
    (timeout,) = [a for a in e.alternatives if a.fault_class is FaultClass.COLLECTIVE_TIMEOUT]
    assert timeout.lost_because == "cascade"
    assert timeout.fired.rule == "nccl.watchdog_timeout" and timeout.fired.pack == "nccl"
    assert "2 line(s)" in timeout.reason


def test_a_weaker_root_loses_as_weaker_and_says_what_would_win() -> None:
    e = explain_text(
        "RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x512 and 256x10)\n"
        "OSError: [Errno 28] No space left on device"
    )
    assert e.fault_class is FaultClass.STORAGE_ERROR
    (app,) = e.alternatives
    assert (app.fault_class, app.lost_because) == (FaultClass.APP_ERROR, "weaker")
    assert any("app.error line weighing more than 0.85" in w for w in e.would_change)


def test_the_strongest_of_many_roots_wins_and_every_other_is_weaker() -> None:
    e = explain_text(
        "NVRM: Xid (PCI:0000:3b:00): 74, pid=1, NVLink: fatal error\n"
        "n1:1:2 [0] NCCL WARN Call to ibv_modify_qp failed with error Connection timed out\n"
        "[ERROR] detected NVSwitch fatal error 12028 on fid 0\n"
        "RuntimeError: cuda runtime error (39) : uncorrectable ECC error encountered\n"
        "srun: error: Node failure on n2"
    )
    # gpu.ecc_uncorrectable (0.92) outweighs node failure (0.9) and every fabric line (<= 0.85)
    assert e.fault_class is FaultClass.GPU_HARDWARE
    assert {a.fault_class: a.lost_because for a in e.alternatives} == {
        FaultClass.NODE_LOST: "weaker",
        FaultClass.NETWORK_FABRIC: "weaker",
    }


def test_ties_go_to_the_class_seen_first() -> None:
    e = explain_text(
        "OSError: [Errno 116] Stale file handle\n"
        "Detected Critical Xid Error (XID=79)\n"
        "Kernel panic - not syncing: Fatal exception\n"
    )
    # storage.error and node.lost weigh 0.85 each; storage came first
    assert e.fault_class is FaultClass.STORAGE_ERROR
    reasons = {a.fault_class: a.lost_because for a in e.alternatives}
    assert reasons[FaultClass.NODE_LOST] == "later"


def test_refinements_and_what_would_undo_them() -> None:
    e = explain_text("""
Traceback (most recent call last):
  File "train.py", line 10, in <module>
    batch = data_queue.get()
KeyboardInterrupt
""")
    assert e.fault_class is FaultClass.JOB_HANG and e.decided_by == "cascade"
    assert e.refinements and e.refinements[0].startswith("job.cancelled -> job.hang")
    assert any("would make it job.cancelled" in w for w in e.would_change)
    assert any("root-cause line" in w for w in e.would_change)


def test_a_cancellation_says_what_would_make_it_a_hang() -> None:
    e = explain_text("KeyboardInterrupt")
    assert e.fault_class is FaultClass.JOB_CANCELLED
    assert any("would make it job.hang" in w for w in e.would_change)


def test_hardware_without_a_host_says_how_to_drain() -> None:
    e = explain_text("RuntimeError: CUDA error: uncorrectable ECC error encountered")
    assert any("would let resurrect drain" in w for w in e.would_change)
    assert "no culprit host identified, so nothing to drain" in e.notes


def test_nothing_matched_is_explained_too() -> None:
    e = explain_text("[rank0]: iteration 10/100 | loss 2.3")
    assert e.fault_class is FaultClass.UNKNOWN and e.decided_by == "none" and e.fired is None
    assert e.would_change and e.alternatives == []
    assert e.lines()[0].startswith("decision: unknown")


def test_explanation_agrees_with_the_diagnosis() -> None:
    lines = XID79_AND_TIMEOUTS.strip().splitlines()
    d = diagnose_lines(lines, file="job.log", engine=ENGINE)
    e = explain_text(XID79_AND_TIMEOUTS)
    assert (e.fault_class, e.confidence, e.action) == (d.fault_class, d.confidence, d.action)
    data = e.as_json()
    assert data["fired"]["rule"] == "xid.fallen_off_bus"
    assert data["alternatives"][0]["lost_because"] == "cascade"
