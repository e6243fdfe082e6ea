"""Which evidence counts and which nodes it may implicate: the trust rules that attribution
proposes with and :mod:`resurrect.plans.decide` settles with.

A job's owner controls every line the job prints, so where a piece of evidence came from
(:func:`evidence_source`) decides what it may do: only a source the job does not control
(the node agent, Slurm) confirms a node for draining (:func:`corroborated_nodes`,
:func:`hardware_evidence`), and only nodes the job ran on are ever named
(:func:`match_job_nodes`). Drain or restart is one rule (:func:`restart_action`), and the
action a diagnosis proposes another (:func:`proposed_action`). Slurm marks a node lost when it
is DOWN, or unavailable otherwise (NOT_RESPONDING, ...) in reads at least a grace apart
(:func:`slurm_marked`, :class:`UnavailabilityReads`): every node is NOT_RESPONDING for a moment
after slurmctld restarts.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from resurrect.contracts import (
    DEFAULT_ACTION,
    HARD_DOWN_NODE_STATES,
    RUNNING_JOB_STATES,
    Diagnosis,
    Evidence,
    EvidenceSource,
    FaultClass,
    JobInfo,
    NodeInfo,
    RecoveryAction,
    SignalKind,
)
from resurrect.numbers import is_ascii_digits
from resurrect.scheduler.base import DRAIN_REASON_PREFIX

# Classes that name failing node hardware: their default action drains the culprit node,
# and draining for them needs a second opinion.
NODE_CLASSES = frozenset({FaultClass.GPU_HARDWARE, FaultClass.NETWORK_FABRIC, FaultClass.NODE_LOST})
# Sources a job cannot forge: what they say about a node counts as a second opinion.
INDEPENDENT_SOURCES: frozenset[EvidenceSource] = frozenset({"node_agent", "scheduler"})
# Rules of scheduler evidence about the job as a whole (not naming a node), and about a node.
_JOB_NODE_FAIL_RULE = "scheduler.job_state"
NODE_STATE_RULE = "scheduler.node_state"
# Classes whose culprit node comes from resurrect's probes of the job (rule 7).
PROBED_CLASSES = frozenset({FaultClass.JOB_HANG, FaultClass.JOB_STRAGGLER})
# Node agent readings of the hardware slowing a GPU down (thermal, power brake): hardware
# evidence for a hang or a straggler although they are only diagnostic on their own.
HARDWARE_SLOWDOWN_RULE_PREFIXES = ("gpu.clocks.",)
# Evidence weaker than this never stops a job (:func:`proposed_action`).
LOW_CONFIDENCE = 0.5
# The follower's memory of the jobs a node was the hang culprit of (rule 8).
HANG_HISTORY_RULE = "progress.hang_history"
# A field marking evidence that rests on what the job says about itself (e.g. a GPU paired
# with a rank by the rank's environment): the job's word whoever reported it.
JOB_CONTROLLED_FIELD = "job_controlled"
# A field marking a node agent's finding that no second source on the node confirms yet
# (a kernel-log Xid NVML has not reported): a sensor's word, no second opinion.
UNCONFIRMED_FIELD = "unconfirmed"


# a step daemon's own line: ``*** STEP 2.0 ON <its node> CANCELLED AT ...``
_STEP_DAEMON_NODE = re.compile(
    r"\*\*\* (?:JOB|STEP) [\w.+]{1,40} ON (?P<node>[\w.-]{1,128}) CANCELLED"
)


def short_name(host: str) -> str:
    """A host's short name, lower case: ``GPU-17.cluster`` -> ``gpu-17``."""
    return host.split(".")[0].lower()


_INTERFACE_SUFFIX = re.compile(r"-ib[0-9]{0,2}$")
"""A host's name for one of its own network interfaces (``node7-ib``, ``node7-ib0``)."""


def same_host(name: str, other: str) -> bool:
    """Whether two host names name one machine: the same :func:`short_name` once an interface
    suffix (``-ib``, ``-ib0``) is set aside (``ng3`` and ``ng3-ib.cluster.org``; an address
    never equals a name)."""
    if (
        not name
        or not other
        or is_ascii_digits(name.replace(".", ""))
        or is_ascii_digits(other.replace(".", ""))
    ):
        return False
    return _INTERFACE_SUFFIX.sub("", short_name(name)) == _INTERFACE_SUFFIX.sub(
        "", short_name(other)
    )


def evidence_source(evidence: Evidence) -> EvidenceSource:
    """Who vouches for ``evidence``: the job when it is marked job-controlled, a sensor
    alone when it is marked unconfirmed, else its ``source``, else what its kind implies."""
    if JOB_CONTROLLED_FIELD in evidence.fields:
        return "job_output"
    if UNCONFIRMED_FIELD in evidence.fields:
        return "sensor"
    if evidence.source is not None:
        return evidence.source
    if evidence.kind is SignalKind.JOB_LOG:
        return "job_output"
    if evidence.kind is SignalKind.SCHEDULER_STATE:
        return "scheduler"
    return "node_agent"  # kernel log, NVML events and metrics, heartbeats


def independent_evidence(diagnosis: Diagnosis) -> list[Evidence]:
    """The diagnosis' evidence that does not come from the job's own output."""
    return [e for e in diagnosis.evidence if evidence_source(e) in INDEPENDENT_SOURCES]


def silence_only(evidence: Evidence) -> bool:
    """Evidence that only says a node's agent fell silent (its heartbeats stopped coming):
    the agent may have died, or its datagrams been lost, on a node that is fine."""
    return evidence.kind is SignalKind.HEARTBEAT and evidence_source(evidence) == "node_agent"


def silent_nodes(diagnosis: Diagnosis) -> set[str]:
    """Short names of the nodes whose agent's silence is evidence of the diagnosis."""
    return {short_name(e.host) for e in diagnosis.evidence if e.host and silence_only(e)}


def needs_to_last(node: NodeInfo) -> bool:
    """A node unavailable without being down (NOT_RESPONDING, UNKNOWN, FAIL flag, ...): what
    a controller that has just restarted shows of every node until its slurmd registers."""
    return node.unavailable and node.state not in HARD_DOWN_NODE_STATES


@dataclass
class UnavailabilityReads:
    """Successive reads of node states, and which nodes stayed unavailable without being
    down (:func:`needs_to_last`) across reads at least a grace apart.

    ``now`` is any clock that only moves forward (the Slurm watcher's monotonic time, the
    seconds of a recovery's pauses); a node that one read shows available, or does not show,
    starts again.
    """

    _since: dict[str, float] = field(default_factory=dict)
    _lasting: set[str] = field(default_factory=set)

    def observe(self, nodes: Iterable[NodeInfo], now: float, grace_s: float) -> set[str]:
        """Take one read, made at ``now``: the names of the nodes it shows unavailable
        without being down that every read over at least ``grace_s`` showed so."""
        waiting = {node.name for node in nodes if needs_to_last(node)}
        for name in list(self._since):
            if name not in waiting:
                del self._since[name]
        self._lasting = {
            name for name in waiting if now - self._since.setdefault(name, now) >= grace_s
        }
        return set(self._lasting)

    @property
    def lasting(self) -> set[str]:
        """The nodes the last read found to have lasted (:meth:`observe`)."""
        return set(self._lasting)

    def pending(self, now: float, grace_s: float) -> dict[str, float]:
        """The nodes the last read showed unavailable without being down that have not
        lasted yet, with the seconds still to wait before a read may confirm each."""
        return {
            name: grace_s - (now - since)
            for name, since in sorted(self._since.items())
            if name not in self._lasting
        }

    def forget(self) -> None:
        """Start again (the controller could not be read: nodes re-register after)."""
        self._since.clear()
        self._lasting.clear()


def slurm_marked(nodes: Iterable[NodeInfo], lasting: Collection[str] | None) -> set[str]:
    """Short names of the nodes Slurm marks lost, as evidence: DOWN (or FAIL) at once; only
    unavailable otherwise (NOT_RESPONDING, ...) when ``lasting`` names them
    (:class:`UnavailabilityReads`). ``lasting`` None: not tracked (a recovery that 0.2.0
    started, replayed as it ran): every unavailable node."""
    return {
        short_name(node.name)
        for node in nodes
        if node.unavailable and (lasting is None or not needs_to_last(node) or node.name in lasting)
    }


def silence_awaiting_a_second_source(
    reported: Sequence[Evidence], job: JobInfo, marked: Collection[str], attempt: int
) -> list[str]:
    """The silent nodes when node agents' silence is all that reports ``job``'s ``attempt``,
    that attempt still runs (or is being torn down: its end is not known yet) and Slurm marks
    none of those nodes (``marked``: :func:`slurm_marked`); else ``[]``.

    Such a report alone changes nothing: an agent that died, or heartbeats lost on the way
    (to a whole cluster at once when the collector's network fails), look like a lost node
    until a second source agrees: the job's attempt ending, Slurm marking the node, or a
    report of another kind.
    """
    if not reported or not all(silence_only(e) for e in reported):
        return []
    if job.state not in RUNNING_JOB_STATES or job.restart_count != attempt:
        return []  # COMPLETING waits too: how the attempt ended is not known yet
    silent = sorted({short_name(e.host) for e in reported if e.host})
    if not silent or set(marked).intersection(silent):
        return []
    return silent


def slurm_troubled(node: NodeInfo, lasting: Collection[str] | None) -> bool:
    """Slurm itself marks ``node`` lost (:func:`slurm_marked` with ``lasting``: DOWN, FAIL,
    or NOT_RESPONDING in reads a grace apart) or shows it drained by someone else (a drain
    of resurrect's own is no second opinion: it may rest on job output itself)."""
    if slurm_marked([node], lasting):
        return True
    return node.drained and not node.reason.startswith(DRAIN_REASON_PREFIX)


def corroborated_nodes(
    candidates: Iterable[str],
    diagnosis: Diagnosis,
    nodes: Sequence[NodeInfo],
    lasting: Collection[str] | None,
) -> tuple[list[str], list[str]]:
    """Split drain candidates into (confirmed by a second source, job output alone).

    A node is confirmed by root evidence from the node agent or the scheduler naming it, by
    Slurm marking it lost (:func:`slurm_marked` with ``lasting``: DOWN, or NOT_RESPONDING in
    reads a grace apart) or drained by someone else, or by the job ending NODE_FAIL when
    Slurm names no other node of the job. Its agent's silence alone (:func:`silence_only`)
    confirms nothing: a killed agent, or heartbeats lost on the way, look the same as a lost
    node until Slurm agrees; nor does one read of a node not responding.
    """
    marked = slurm_marked(nodes, lasting)
    independent = independent_evidence(diagnosis)
    named = {
        short_name(e.host)
        for e in independent
        if e.host
        and not silence_only(e)
        and (e.role == "root" or evidence_source(e) == "node_agent")
        and (e.rule != NODE_STATE_RULE or short_name(e.host) in marked)
    }
    troubled = {short_name(n.name) for n in nodes if slurm_troubled(n, lasting)}
    job_node_fail = any(
        e.rule == _JOB_NODE_FAIL_RULE and e.fault_class is FaultClass.NODE_LOST for e in independent
    )
    confirmed: list[str] = []
    alone: list[str] = []
    for name in candidates:
        short = short_name(name)
        if short in named or short in troubled:
            confirmed.append(name)
        elif job_node_fail and not troubled:
            confirmed.append(name)
        else:
            alone.append(name)
    return confirmed, alone


def match_job_nodes(hosts: Iterable[str], job_nodes: Iterable[str]) -> tuple[list[str], list[str]]:
    """Map host names from evidence onto the job's node names.

    A host matches a node by equal name or equal short name (``gpu-17.cluster`` ~ ``gpu-17``).
    Returns (matched node names, host names that matched no node of the job).
    """
    nodes = list(dict.fromkeys(job_nodes))
    by_short = {short_name(node): node for node in nodes}
    matched: list[str] = []
    unmatched: list[str] = []
    for host in hosts:
        node = by_short.get(short_name(host))
        if node is None:
            unmatched.append(host)
        elif node not in matched:
            matched.append(node)
    return matched, unmatched


def names_a_node_the_attempt_lacks(evidence: Evidence, attempt_nodes: Sequence[str]) -> bool:
    """A node-lost line naming a node that the job's attempt does not run on: as the node
    lost (``srun: error: Node failure on n4``) or as the node of the step daemon that prints
    it (``*** STEP 2.0 ON n4 CANCELLED ... DUE TO NODE FAILURE ***``), with the attempt on n2.
    Slurm says either only of a node of the step's own allocation, so the line is an earlier
    attempt's: a fenced or thawed ``srun`` or step daemon printing into the output its
    successor shares. It is no fault of this attempt. Unknown nodes (an empty list) decide
    nothing."""
    if evidence.fault_class is not FaultClass.NODE_LOST or not attempt_nodes:
        return False
    return any(not match_job_nodes([n], attempt_nodes)[0] for n in _nodes_named(evidence))


def _nodes_named(evidence: Evidence) -> list[str]:
    """The nodes a node-lost line names: the node lost (its ``host`` field), then the node
    of the step daemon printing it."""
    daemon = _STEP_DAEMON_NODE.search(evidence.text)
    return [n for n in (evidence.fields.get("host"), daemon and daemon["node"]) if n]


# The rule of the finding that an earlier attempt's leftovers ended this one.
EARLIER_ATTEMPT_LEFTOVER_RULE = "recovery.earlier_attempt_leftover"


def earlier_attempts_leftover(
    dropped: Sequence[Evidence],
    kept: Sequence[Evidence],
    attempt_nodes: Sequence[str],
    lost_before: Collection[str],
) -> Evidence | None:
    """The attempt ended by what an earlier attempt left running: a node-lost line of a node
    this attempt never ran on (``dropped``, :func:`names_a_node_the_attempt_lacks`), that node
    one an earlier attempt of the job lost by resurrect's own record (``lost_before``), and a
    step daemon of this attempt's own nodes reporting its step cancelled (``kept``). Slurm
    numbers a requeued job's steps from 0 again, so the earlier attempt's ``srun``, thawed on
    a frozen host or back from a partition before its fence, hears of its node's failure and
    cancels "its" step: the step of that number the new attempt runs. The result (None when
    any part is missing) is a root ``node.lost`` finding naming that earlier node, the
    record's word rather than the job's; it drains nothing of this attempt."""
    if not dropped or not attempt_nodes or not lost_before:
        return None
    cancelled = next(
        (
            e
            for e in kept
            if (daemon := _STEP_DAEMON_NODE.search(e.text)) is not None
            and match_job_nodes([daemon["node"]], attempt_nodes)[0]
        ),
        None,
    )
    if cancelled is None:
        return None
    for line in dropped:
        lost, _ = match_job_nodes(_nodes_named(line), lost_before)
        if lost:
            return Evidence(
                kind=SignalKind.SCHEDULER_STATE,
                source="scheduler",
                rule=EARLIER_ATTEMPT_LEFTOVER_RULE,
                role="root",
                fault_class=FaultClass.NODE_LOST,
                confidence=0.95,
                host=lost[0],
                text=(
                    f"{lost[0]} was lost under an earlier attempt (its recovery's record);"
                    f" that attempt's leftovers there ended this one: {line.text[:120]!r},"
                    f" then {cancelled.text[:120]!r}"
                ),
            )
    return None


def hardware_evidence(evidence: Iterable[Evidence], host: str) -> list[Evidence]:
    """What the node agent or Slurm says is wrong with ``host``'s hardware (rule 7): root or
    diagnostic findings of a hardware class, or of the hardware slowing a GPU down."""
    return [
        e
        for e in evidence
        if e.host
        and short_name(e.host) == short_name(host)
        and evidence_source(e) in INDEPENDENT_SOURCES
        and (
            e.fault_class in NODE_CLASSES
            or (e.rule or "").startswith(HARDWARE_SLOWDOWN_RULE_PREFIXES)
        )
    ]


def probed_culprits(diagnosis: Diagnosis) -> list[str]:
    """The nodes a hang's or straggler's probes name: the diagnosis' culprit hosts and the
    hosts of its root evidence of that class."""
    hosts = [
        *diagnosis.culprit_hosts,
        *(
            e.host
            for e in diagnosis.evidence
            if e.host and e.role == "root" and e.fault_class is diagnosis.fault_class
        ),
    ]
    return list(dict.fromkeys(hosts))


def restart_action(fault_class: FaultClass, culprit_hosts: Sequence[str]) -> RecoveryAction:
    """Drain or restart: ``drain_and_restart`` when the class' default is to drain and a
    culprit host is known, ``restart`` otherwise. Apply it to restarting actions only."""
    if DEFAULT_ACTION[fault_class] is RecoveryAction.DRAIN_AND_RESTART and culprit_hosts:
        return RecoveryAction.DRAIN_AND_RESTART
    return RecoveryAction.RESTART


def proposed_action(
    fault_class: FaultClass, culprit_hosts: Sequence[str], confidence: float
) -> tuple[RecoveryAction, str | None]:
    """The action a diagnosis proposes, with a note when it is not the class' default.

    Drain or restart is :func:`restart_action`'s rule (the recovery's
    ``decide()`` settles the drain again against the job's nodes and a second source);
    evidence weaker than ``LOW_CONFIDENCE`` never stops a job.
    """
    action = DEFAULT_ACTION[fault_class]
    if action is RecoveryAction.DRAIN_AND_RESTART:
        action = restart_action(fault_class, culprit_hosts)
        if action is RecoveryAction.RESTART:
            return action, "no culprit host identified, so nothing to drain"
    if confidence < LOW_CONFIDENCE and action is RecoveryAction.STOP:
        return RecoveryAction.RESTART, "evidence too weak to stop the job"
    return action, None
