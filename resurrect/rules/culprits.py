"""Who failed: the culprit ranks, hosts and GPUs of a chosen fault class.

Collective timeouts point at the rank that stopped participating; fabric errors at a host that
recurs across failed links (or whose own adapter failed); a lost peer at that peer; a hang at the
ranks resurrect's probes found behind; anything else at the ranks and hosts of its decisive lines,
narrowed by the launcher's first observed failure.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from resurrect.contracts import Evidence, FaultClass, SignalKind
from resurrect.numbers import is_ascii_digits
from resurrect.rules.launcher_records import LauncherRecord, first_failure
from resurrect.rules.timeline import print_order

MAX_LISTED = 50
LOST_PEER_CONFIDENCE = 0.45
"""A node loss inferred only from survivors' closed connections: below the confidence at which a
scheduler-observed node loss (with the node's real name) takes over, and never a stop."""
LOCAL_FABRIC_RULES = ("nccl.ib_verbs_failure", "nccl.ib_link_down", "xid.", "gpu.")
"""Fabric evidence about the reporting host's own adapter or NVLink (not a two-ended link)."""
PROBE_KINDS = frozenset({SignalKind.STACK_DUMP, SignalKind.PROGRESS})
"""Evidence from resurrect's own probes of the ranks (their stacks, their progress)."""
RANK_CONTEXT_RULES = frozenset(
    {"python.rank_traceback", "ascend.error_header", "mpi.errhandler_reporter"}
)
"""Lines that only say which rank is talking: a ``[rankN]:`` traceback, CANN's ``(PID:..,
Device:.., RankID:N)`` error header, Open MPI's ``*** reported by process [jobid,rank]``."""
TRACEBACK_NEIGHBOUR_LINES = 5
"""Such a line this close to a decisive line without a rank is that line's rank's."""
BEHIND_RULES = frozenset({"flight_recorder.behind", "nccl_ras.rank"})
"""Probe findings that name a rank behind its peers (the job's Flight Recorder, NCCL RAS)."""
NO_CULPRIT_CLASSES = frozenset(
    {FaultClass.JOB_TIME_LIMIT, FaultClass.JOB_PREEMPTED, FaultClass.JOB_CANCELLED}
)
REPORT_HOST_RULES = frozenset({"node.mpi_report_host", "mpi.local_abort"})
ACTOR_HOST_RULES = frozenset({"node.ray_actor_ip_field"})
ACTOR_HOST_LINES = 8
"""Ray prints an actor error's fields (``\tip: X`` among them) just before the death reason."""
REPORT_HOST_LINES = 4
"""Open MPI's reports name the node on a line of their own, this close after the headline: a
help message's indented ``hostname:`` line ("ORTE has lost communication with its daemon located
on node:"), the ``[host:pid] Local abort before MPI_INIT ...`` note after a process's own report
of why it aborted."""
CRASH_HANDLER_RULES = frozenset({"python.signal_handler_backtrace"})
"""A fatal-signal handler framing a process's own backtrace (Open MPI's): that process crashed."""
TEARDOWN_SIGNAL_RULES = frozenset({"python.abort"})
"""A rank that aborted was torn down (or failed a check): its handler's frame is no crash."""
WATCHDOG_TIMEOUT_RULES = frozenset({"nccl.watchdog_timeout"})
"""ProcessGroupNCCL's watchdog naming the work that timed out (its sequence number and type)."""
ABORTED_LIST_RULES = frozenset({"launcher.paddle_trainers_aborted"})
"""Launcher reports that list every rank that failed."""
DESYNC_REPORT_RULE = "nccl.desync_report"
"""PyTorch's desync report: the ranks behind a timed-out collective."""
_RANK_LIST = re.compile(r"[0-9]+")
_READY_LISTS = re.compile(r"(?:^|\[ready ranks: )([0-9][0-9, ]*)")
"""Each tensor's ready-rank list in a ``horovod.ready_ranks`` field: the first leads it, the
others follow their own ``[ready ranks: `` (the tensor names between them are skipped)."""


def horovod_stalled_ranks(timeouts: Sequence[Evidence]) -> list[int]:
    """The ranks Horovod's stall report says never submitted a pending tensor: the ranks of its
    ``N: [...]`` lines, else the ranks still missing at its last ``[missing ranks: ...]`` line
    (a rank that submitted later was slow, not stalled), else, from its older ``[ready ranks:
    ...]`` lists, the ranks below the highest ready one that are missing from most of the stalled
    tensors (never ready, when every tensor waits on the same ranks)."""
    stalled = {
        int(e.fields["stalled"]) for e in timeouts if is_ascii_digits(e.fields.get("stalled", ""))
    }
    if stalled:
        return sorted(stalled)
    missing = [e for e in print_order(timeouts) if e.fields.get("missing")]
    if missing:
        return sorted({int(x) for x in _RANK_LIST.findall(missing[-1].fields["missing"])})
    tensors = [
        {int(x) for x in _RANK_LIST.findall(ready_list)}
        for e in timeouts
        for ready_list in _READY_LISTS.findall(e.fields.get("ready", ""))
    ]
    if not tensors:
        return []
    highest = max(max(ready) for ready in tensors)
    return [
        r for r in range(highest + 1) if 2 * sum(r not in ready for ready in tensors) > len(tensors)
    ]


def coordination_silent_tasks(timeouts: Sequence[Evidence]) -> list[int]:
    """The tasks a coordination service (XLA/PJRT, TensorFlow) set to ERROR or stopped hearing
    heartbeats from: the service watches every task and names the ones that stopped. Named
    tasks single out nobody when the log shows no other task (a one-process job's task 0, or
    every task there is); task N implies tasks 0 to N."""
    named = {
        int(value)
        for e in timeouts
        for value in (e.fields.get("silent", ""), e.fields.get("in_error", ""))
        if is_ascii_digits(value)
    }
    if not named:
        return []
    known = set(range(max(named) + 1)) | {e.rank for e in timeouts if e.rank is not None}
    return sorted(named) if known - named else []


def _group(e: Evidence) -> str:
    return e.fields.get("pg_guid") or e.fields.get("pg") or ""


def _work(e: Evidence) -> str:
    return e.fields.get("seq") or e.fields.get("seq2") or ""


def _groups_by_work(timeouts: Sequence[Evidence]) -> dict[tuple[int, str], str]:
    """The process group of each rank's timed-out work, from the lines that name one: a line
    that does not (a release's "Timeout at NCCL work: N" after the watchdog's report, a paste
    cut before its ``[PG ...]`` prefix) is about the same work of the same group."""
    return {
        (e.rank, _work(e)): _group(e)
        for e in timeouts
        if e.rank is not None and _work(e) and _group(e)
    }


def collective_culprits(evidence: Sequence[Evidence], cascades: Sequence[Evidence]) -> list[int]:
    """The rank(s) that stopped participating in a timed-out collective, when identifiable."""
    timeouts = [e for e in cascades if e.fault_class is FaultClass.COLLECTIVE_TIMEOUT]
    stalled = horovod_stalled_ranks(timeouts)
    if stalled:
        return stalled
    silent = coordination_silent_tasks(timeouts)
    if silent:
        return silent
    # The desync report names the lagging ranks directly.
    named = desync_ranks(timeouts)
    reporters = {e.rank for e in timeouts if e.rank is not None}
    if named:
        return lagging_ranks(named, reporters)
    # The rank whose last completed sequence number is strictly lowest - comparable only within
    # one process group (each group numbers its own collectives).
    last: dict[int, int] = {}
    groups: set[str] = set()
    named_groups = _groups_by_work(timeouts)
    for e in timeouts:
        value = e.fields.get("last_completed") or e.fields.get("last_completed2")
        if e.rank is not None and value is not None and is_ascii_digits(value.lstrip("-")):
            last[e.rank] = min(int(value), last.get(e.rank, int(value)))
            groups.add(_group(e) or named_groups.get((e.rank, _work(e)), ""))
    if len(last) >= 2 and len(groups) == 1:
        low = min(last.values())
        lowest = [r for r, v in last.items() if v == low]
        if len(lowest) == 1 and len(lowest) < len(last):
            return lowest
    behind = _rank_behind_in_timed_out_work(timeouts)
    if behind is not None:
        return [behind]
    # A rank that never reported while the others did.
    world = 0
    for e in evidence:
        size = e.fields.get("world_size")
        if size and is_ascii_digits(size):
            world = max(world, int(size))
    known = set(range(world)) if world else {e.rank for e in evidence if e.rank is not None}
    missing = known - reporters
    if len(reporters) >= 2 and missing and len(missing) < len(reporters):
        return sorted(missing)
    return []


def _rank_behind_in_timed_out_work(timeouts: Sequence[Evidence]) -> int | None:
    """The one rank whose watchdog timed out on an earlier collective of the same kind than every
    other reporter's ("[Rank 0] ... SeqNum=7559, OpType=_ALLGATHER_BASE" while rank 1 is at
    7561): it is behind the others. Compared only where each reporter names exactly one timed-out
    work, all of one operation type and one process group; a rank reporting several works (one
    per group) makes the numbers incomparable."""
    works: dict[int, set[tuple[int, str, str]]] = {}
    for e in timeouts:
        seq, op = e.fields.get("seq", ""), e.fields.get("op", "")
        if e.rule in WATCHDOG_TIMEOUT_RULES and e.rank is not None and is_ascii_digits(seq) and op:
            works.setdefault(e.rank, set()).add((int(seq), op, _group(e)))
    if len(works) < 2 or any(len(w) != 1 for w in works.values()):
        return None
    single = {rank: next(iter(w)) for rank, w in works.items()}
    if len({(op, group) for _, op, group in single.values()}) != 1:
        return None
    low = min(seq for seq, _, _ in single.values())
    lowest = [rank for rank, (seq, _, _) in single.items() if seq == low]
    return lowest[0] if len(lowest) == 1 else None


def fabric_culprits(roots: Sequence[Evidence]) -> list[str]:
    """A host that recurs across more failed links than any other, or the one host whose own
    adapter or NVLink failed."""
    pairs: set[tuple[str, str]] = set()
    for e in roots:
        peer = e.fields.get("peer")
        if e.host and peer:
            a, b = sorted((e.host, peer))
            pairs.add((a, b))
    counts = Counter(end for pair in pairs for end in pair)
    if len(pairs) >= 2 and counts:
        (top, n), *rest = counts.most_common()
        if n >= 2 and (not rest or rest[0][1] < n):
            return [top]
    local = {
        e.host
        for e in roots
        if e.host and not e.fields.get("peer") and (e.rule or "").startswith(LOCAL_FABRIC_RULES)
    }
    return sorted(local) if len(local) == 1 else []


def lost_node_culprits(
    primary: Sequence[Evidence], hosts: Mapping[int, str], evidence: Sequence[Evidence]
) -> list[str]:
    """The lost node: named by the scheduler or kernel (on the line, or on the report's own host
    line just after it), else the one peer survivors lost."""
    direct = [e for e in primary if not e.fields.get("peer")]
    if direct:
        return [
            h
            for h in ordered_unique(
                [
                    e.host
                    or hosts.get(e.rank if e.rank is not None else -1)
                    or reported_host(e, evidence)
                    or actor_host(e, evidence)
                    for e in direct
                ]
            )
            if isinstance(h, str)
        ]
    peers = {e.fields["peer"] for e in primary if e.fields.get("peer")}
    return sorted(peers) if len(peers) == 1 else []


def reported_host(line: Evidence, evidence: Sequence[Evidence]) -> str | None:
    """The host a report prints on a line of its own just after ``line`` (Open MPI)."""
    if line.line is None:
        return None
    return next(
        (
            e.host
            for e in evidence
            if e.rule in REPORT_HOST_RULES
            and e.host
            and e.file == line.file
            and e.line is not None
            and 0 < e.line - line.line <= REPORT_HOST_LINES
        ),
        None,
    )


def actor_host(line: Evidence, evidence: Sequence[Evidence]) -> str | None:
    """The host of the Ray actor whose field block ends just before ``line`` (its last ``ip:``)."""
    if line.line is None:
        return None
    fields = [
        e.host
        for e in print_order(evidence)
        if e.rule in ACTOR_HOST_RULES
        and e.host
        and e.file == line.file
        and e.line is not None
        and 0 < line.line - e.line <= ACTOR_HOST_LINES
    ]
    return fields[-1] if fields else None


def reported_hosts(lines: Sequence[Evidence], evidence: Sequence[Evidence]) -> list[str]:
    """The hosts reports print on a line of their own just after ``lines``, once each."""
    found = ordered_unique([reported_host(line, evidence) for line in lines])
    return [h for h in found if isinstance(h, str)]


def desync_ranks(evidence: Sequence[Evidence]) -> set[int]:
    """Every rank PyTorch's desync report lists as lagging, dead or mismatched."""
    named: set[int] = set()
    for e in evidence:
        if e.rule == DESYNC_REPORT_RULE:
            named.update(int(x) for x in _RANK_LIST.findall(e.fields.get("ranks", "")))
    return named


def lagging_ranks(named: set[int], reporters: set[int]) -> list[int]:
    """The desync report's ranks, unless every rank whose timeout was reported is among them
    (all joined: nobody is singled out)."""
    if reporters and reporters <= named:
        return []
    return sorted(named)


def stopped_ranks(evidence: Sequence[Evidence]) -> list[int]:
    """The ranks a desync report names as behind a timed-out collective, for a failure whose
    own lines name no rank (a native crash's handler prints none): the rank that stopped is
    the one that failed; none when the report lists every rank that timed out."""
    named = desync_ranks(evidence)
    reporters = {
        e.rank
        for e in evidence
        if e.fault_class is FaultClass.COLLECTIVE_TIMEOUT
        and e.rule != DESYNC_REPORT_RULE
        and e.rank is not None
    }
    return lagging_ranks(named, reporters) if named else []


def aborted_ranks(evidence: Sequence[Evidence]) -> list[int]:
    """The ranks a launcher lists as aborted (paddle.distributed.launch's "the trainer process
    with rank=[0, 2] was aborted"), from its last such report; none when it lists every rank of
    the job (they failed alike)."""
    reports = [e for e in print_order(evidence) if e.rule in ABORTED_LIST_RULES]
    if not reports:
        return []
    listed = sorted({int(x) for x in _RANK_LIST.findall(reports[-1].fields.get("ranks", ""))})
    world = reports[-1].fields.get("world_size", "")
    return listed if is_ascii_digits(world) and len(listed) < int(world) else []


def traceback_ranks(decisive: Sequence[Evidence], evidence: Sequence[Evidence]) -> list[int]:
    """The rank whose ``[rankN]:`` traceback (or other :data:`RANK_CONTEXT_RULES` line) was
    printed around the decisive lines (within :data:`TRACEBACK_NEIGHBOUR_LINES`, same file), when
    exactly one rank's was."""
    found: set[int] = set()
    for line in decisive:
        if line.line is None:
            continue
        found.update(
            e.rank
            for e in evidence
            if e.rule in RANK_CONTEXT_RULES
            and e.rank is not None
            and e.file == line.file
            and e.line is not None
            and abs(e.line - line.line) <= TRACEBACK_NEIGHBOUR_LINES
        )
    return sorted(found) if len(found) == 1 else []


def crashed_handler_ranks(evidence: Sequence[Evidence]) -> list[int]:
    """The ranks whose own fatal-signal handler framed a backtrace (``[1,2]<stderr>:[host:pid]
    *** End of error message ***``), in print order - each crashed itself, whatever the launcher
    reported first; a rank that also aborted is left out (an abort is a teardown or a failed
    check, not the crash)."""
    aborted = {e.rank for e in evidence if e.rule in TEARDOWN_SIGNAL_RULES}
    return [
        r
        for r in ranks_named([e for e in print_order(evidence) if e.rule in CRASH_HANDLER_RULES])
        if r not in aborted
    ]


def ranks_named(evidence: Sequence[Evidence]) -> list[int]:
    """The ranks ``evidence`` names, in order, once each; a range (srun's ``tasks 1-3``)
    names each of its ranks, up to :data:`MAX_LISTED`."""
    named: list[int | None] = []
    for e in evidence:
        named.append(e.rank)
        last = e.fields.get("rank_last", "")
        if e.rank is not None and is_ascii_digits(last):
            named.extend(range(e.rank + 1, min(int(last), e.rank + MAX_LISTED) + 1))
    return [r for r in ordered_unique(named) if isinstance(r, int)]


def hosts_named(evidence: Sequence[Evidence], hosts: Mapping[int, str]) -> list[str]:
    """The hosts ``evidence`` names (its own, else its rank's), in order, once each."""
    named = [e.host or hosts.get(e.rank if e.rank is not None else -1) for e in evidence]
    return [h for h in ordered_unique(named) if isinstance(h, str)]


def hosts_of(
    ranks: Sequence[int], evidence: Sequence[Evidence], hosts: Mapping[int, str]
) -> list[str]:
    """The hosts of ``ranks``: as their own lines say, else as the launcher's map says."""
    found: list[str | None] = []
    for rank in ranks:
        own = next((e.host for e in evidence if e.rank == rank and e.host), None)
        found.append(own or hosts.get(rank))
    return [h for h in ordered_unique(found) if isinstance(h, str)]


def ordered_unique(values: Sequence[object]) -> list[object]:
    seen: list[object] = []
    for v in values:
        if v is not None and v not in seen:
            seen.append(v)
    return seen


@dataclass
class Culprits:
    """The ranks, hosts and GPUs a diagnosis blames, and what the blame rests on."""

    ranks: list[int] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    gpus: list[str] = field(default_factory=list)
    confidence_cap: float | None = None
    """A ceiling on the diagnosis' confidence when the culprit is only inferred."""
    notes: list[str] = field(default_factory=list)


def find_culprits(
    fault_class: FaultClass,
    primary: Sequence[Evidence],
    *,
    evidence: Sequence[Evidence],
    cascades: Sequence[Evidence],
    has_roots: bool,
    records: Sequence[LauncherRecord],
    hosts: dict[int, str],
    weight: Callable[[Evidence], float],
    teardown: bool,
) -> Culprits:
    """The culprits of ``fault_class`` among ``evidence``, by the kind of fault it is.

    ``primary`` is the evidence of the chosen class, ``hosts`` the rank-to-host map (the
    launcher's first failure may add to it), ``weight`` a line's rule confidence, ``teardown``
    whether a teardown exit may name the first failure (the class was decided by cascades)."""
    found = Culprits()
    ordered = print_order(primary)
    behind = [e for e in evidence if e.rule in BEHIND_RULES and e.rank is not None]
    if fault_class is FaultClass.COLLECTIVE_TIMEOUT and not has_roots:
        found.ranks = ranks_named(behind) or collective_culprits(evidence, cascades)
        found.hosts = hosts_of(found.ranks, [*behind, *cascades], hosts)
    elif fault_class is FaultClass.NETWORK_FABRIC:
        found.hosts = fabric_culprits(primary)
        found.ranks = ranks_named(ordered)
    elif fault_class is FaultClass.NODE_LOST:
        found.hosts = lost_node_culprits(ordered, hosts, evidence)
        if all(e.fields.get("peer") for e in primary):
            found.confidence_cap = LOST_PEER_CONFIDENCE
            found.notes.append(
                "inferred from survivors' closed connections to " + ", ".join(found.hosts)
                if found.hosts
                else "survivors lost connections to several peers: no single lost node"
            )
    elif fault_class is FaultClass.JOB_HANG:
        probed = [e for e in ordered if e.kind in PROBE_KINDS and (e.rank is not None or e.host)]
        named = probed or behind
        found.ranks = ranks_named(named)
        found.hosts = hosts_of(found.ranks, named, hosts) or hosts_named(named, hosts)
    elif fault_class not in NO_CULPRIT_CLASSES:
        found.ranks, found.hosts = _decisive_culprits(
            ordered, evidence, records, hosts, weight, teardown
        )
        if fault_class is FaultClass.PROCESS_CRASH and found.ranks:
            # every rank whose own handler framed a crash failed too, beside the decisive one
            crashed = [r for r in crashed_handler_ranks(evidence) if r not in found.ranks]
            found.ranks = [*found.ranks, *crashed]
    found.gpus = [g for g in ordered_unique([e.gpu for e in ordered]) if isinstance(g, str)]
    return found


def _decisive_culprits(
    ordered: Sequence[Evidence],
    evidence: Sequence[Evidence],
    records: Sequence[LauncherRecord],
    hosts: dict[int, str],
    weight: Callable[[Evidence], float],
    teardown: bool,
) -> tuple[list[int], list[str]]:
    """The ranks and hosts of the strongest lines of the chosen class, narrowed to the rank the
    launcher saw fail first when it is among them."""
    top = max(weight(e) for e in ordered)
    decisive = [e for e in ordered if weight(e) >= top]
    # the strongest lines that name a rank, when the strongest of all name none
    ranked = [e for e in ordered if e.rank is not None]
    top_ranked = max((weight(e) for e in ranked), default=0.0)
    ranks = (
        ranks_named(decisive)
        or ranks_named([e for e in ranked if weight(e) >= top_ranked])
        or traceback_ranks(decisive, evidence)
    )
    # The launcher's "first observed failure" picks one of several failing ranks; an exit
    # report only names a rank where nothing else does.
    root = first_failure(records, [], teardown=teardown)
    first = root if root is not None or ranks else first_failure([], evidence)
    if first is not None and (not ranks or first[0] in ranks):
        ranks = [first[0]]
        if first[1]:
            hosts.setdefault(first[0], first[1])
    ranks = ranks or aborted_ranks(evidence) or stopped_ranks(evidence)
    culprit_hosts = (
        hosts_named(decisive, hosts)
        or hosts_named(ordered, hosts)
        or hosts_of(ranks, evidence, hosts)
        or reported_hosts(decisive, evidence)
    )
    if ranks and len(culprit_hosts) > 1:
        culprit_hosts = hosts_of(ranks, ordered, hosts) or culprit_hosts
    return ranks, culprit_hosts
