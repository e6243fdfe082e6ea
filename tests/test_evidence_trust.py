"""Which node states are Slurm's word that a node is lost (resurrect/evidence_trust.py)."""

from __future__ import annotations

from resurrect.contracts import NodeInfo
from resurrect.evidence_trust import UnavailabilityReads, needs_to_last, slurm_marked

GRACE = 4.0


def node(name: str, state: str = "ALLOCATED", *flags: str) -> NodeInfo:
    return NodeInfo(name=name, state=state, flags=list(flags))


def test_down_is_marked_at_once_not_responding_only_once_it_lasted() -> None:
    nodes = [node("a", "DOWN", "NOT_RESPONDING"), node("b", "IDLE", "NOT_RESPONDING"), node("c")]
    assert [needs_to_last(n) for n in nodes] == [False, True, False]
    assert slurm_marked(nodes, lasting=[]) == {"a"}
    assert slurm_marked(nodes, lasting=["b"]) == {"a", "b"}
    assert slurm_marked(nodes, lasting=None) == {"a", "b"}  # not tracked: 0.2.0's rule


def test_two_reads_a_grace_apart_both_showing_it_make_it_last() -> None:
    reads = UnavailabilityReads()
    blip = [node("n1", "MIXED", "NOT_RESPONDING"), node("n2", "ALLOCATED", "NOT_RESPONDING")]
    assert reads.observe(blip, 0.0, GRACE) == set()
    assert reads.pending(0.0, GRACE) == {"n1": GRACE, "n2": GRACE}
    assert reads.observe(blip, 3.0, GRACE) == set()  # not a grace apart yet
    assert reads.pending(3.0, GRACE) == {"n1": 1.0, "n2": 1.0}
    assert reads.observe(blip, 4.0, GRACE) == {"n1", "n2"}
    assert reads.lasting == {"n1", "n2"} and reads.pending(4.0, GRACE) == {}


def test_a_read_showing_the_node_back_starts_it_again() -> None:
    """A controller restart: every node not responding, then registered again; a second
    blip later is a new one, not the first one lasting."""
    reads = UnavailabilityReads()
    blip = [node("n1", "IDLE", "NOT_RESPONDING")]
    reads.observe(blip, 0.0, GRACE)
    assert reads.observe([node("n1", "IDLE")], 10.0, GRACE) == set()
    assert reads.observe(blip, 20.0, GRACE) == set()
    assert reads.observe([], 30.0, GRACE) == set()  # a node not shown is available
    assert reads.observe(blip, 40.0, GRACE) == set()
    reads.forget()
    assert reads.observe(blip, 50.0, GRACE) == set() and reads.pending(50.0, GRACE)


def test_a_down_node_is_not_waited_for() -> None:
    reads = UnavailabilityReads()
    assert reads.observe([node("n1", "DOWN", "NOT_RESPONDING")], 0.0, GRACE) == set()
    assert reads.pending(0.0, GRACE) == {}


def test_a_lost_node_the_attempt_does_not_run_on_is_an_earlier_attempts() -> None:
    from resurrect.contracts import Evidence, FaultClass, SignalKind
    from resurrect.evidence_trust import names_a_node_the_attempt_lacks

    def line(host: str | None, fault: FaultClass = FaultClass.NODE_LOST) -> Evidence:
        fields = {"host": host} if host else {}
        return Evidence(
            kind=SignalKind.JOB_LOG, text="srun: error: Node failure on x", rule="r",
            role="root", fault_class=fault, host=host, fields=fields,
        )  # fmt: skip

    assert names_a_node_the_attempt_lacks(line("node4"), ["node2"])
    daemon = line(None).model_copy(
        update={
            "text": "slurmstepd-node4: error: *** STEP 2.0 ON node4 CANCELLED AT"
            " 2026-12-03T14:43:08 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***"
        }
    )
    assert names_a_node_the_attempt_lacks(daemon, ["node2"])
    assert not names_a_node_the_attempt_lacks(daemon, ["node4", "node2"])
    assert not names_a_node_the_attempt_lacks(line("node2.cluster"), ["node2"])
    assert not names_a_node_the_attempt_lacks(line(None), ["node2"])  # names no node
    assert not names_a_node_the_attempt_lacks(line("node4"), [])  # the attempt's nodes unknown
    # only a lost node decides: a GPU line naming another host is judged elsewhere
    assert not names_a_node_the_attempt_lacks(line("node4", FaultClass.GPU_HARDWARE), ["node2"])
