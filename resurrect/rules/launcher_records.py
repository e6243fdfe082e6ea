"""What launchers report about the ranks they ran: failure records, exit reports, rank hosts.

torchelastic's error report ("Root Cause (first observed failure)" and "Failures") is rebuilt
into records (rank, host, exit code, pid); a root-cause record that died of a signal becomes
evidence of its own. NCCL's INFO lines map process ids and ranks to hosts. :func:`first_failure`
names the rank the launcher saw fail first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from resurrect.contracts import Evidence, FaultClass
from resurrect.numbers import is_ascii_digits
from resurrect.rules.timeline import print_order

EXIT_REPORT_RULES = frozenset(
    {
        "torchelastic.worker_exit",
        "torchelastic.worker_signal_crash",
        "launcher.worker_command_exit",
        "launcher.ray_train_worker_failed",
        "launcher.mpirun_signal_crash",
        "launcher.mpirun_first_failure",
        "launcher.paddle_container_failed",
        "slurm.task_exit",
        "slurm.task_signal",
        "slurm.task_killed",
        "slurm.task_out_of_memory",
        "memory.sigkill_worker",
        "python.spawn_child_failed",
    }
)
"""Launcher and scheduler lines that name a rank that exited badly (its cause is elsewhere)."""
TEARDOWN_EXIT_CODES = frozenset({-6, -15, -2, -1})
"""Exit codes of a process taken down after another failure (or by a person): never a culprit."""
PROCESS_HOST_RULE = "nccl.process_host"
SIGNAL_EXIT: dict[int, tuple[FaultClass, str, float]] = {
    -9: (FaultClass.MEMORY_HOST_OOM, "root", 0.35),
    -11: (FaultClass.PROCESS_CRASH, "root", 0.6),
    -7: (FaultClass.PROCESS_CRASH, "root", 0.6),
    -4: (FaultClass.PROCESS_CRASH, "root", 0.6),
    -8: (FaultClass.PROCESS_CRASH, "root", 0.6),
    -6: (FaultClass.PROCESS_CRASH, "cascade", 0.35),
}
_RECORD_OPENERS = frozenset({"torchelastic.block_host", "torchelastic.block_rank"})
"""Lines that open a torchelastic failure record when no section header came before them."""


@dataclass
class LauncherRecord:
    """One failure record of a torchelastic error report."""

    root: bool
    host: str | None = None
    rank: int | None = None
    exit_code: int | None = None
    pid: str | None = None
    evidence: list[Evidence] = field(default_factory=list)


def launcher_records(evidence: Sequence[Evidence]) -> list[LauncherRecord]:
    """Rebuild torchelastic failure records from their matched lines (per file, in order).

    A record pasted without its section header (its ``host :`` or ``rank : N (local_rank: M)``
    line comes first) is read as the root cause - that is the record people quote - unless the
    same file also shows the "Root Cause" section itself."""
    records: list[LauncherRecord] = []
    section: dict[str | None, bool] = {}
    current: dict[str | None, LauncherRecord] = {}
    headerless: list[tuple[str | None, LauncherRecord]] = []
    explicit_root: set[str | None] = set()
    for ev in evidence:
        rule = ev.rule or ""
        if not rule.startswith("torchelastic.block_"):
            continue
        key = ev.file
        if rule == "torchelastic.block_header":
            section[key] = ev.fields.get("section", "").startswith("Root")
            if section[key]:
                explicit_root.add(key)
            current.pop(key, None)
            continue
        implicit = key not in section
        if implicit:
            if rule not in _RECORD_OPENERS:
                continue
            section[key] = True
        rec = current.get(key)
        if rule == "torchelastic.block_host" or rec is None:
            rec = LauncherRecord(root=section[key])
            current[key] = rec
            records.append(rec)
            if implicit:
                headerless.append((key, rec))
        rec.evidence.append(ev)
        if rule == "torchelastic.block_host":
            rec.host = ev.fields.get("host")
        elif rule == "torchelastic.block_rank" and ev.rank is not None:
            rec.rank = ev.rank
        elif rule == "torchelastic.block_exitcode":
            rec.pid = ev.fields.get("pid")
            try:
                rec.exit_code = int(ev.fields.get("exit_code", ""))
            except ValueError:
                rec.exit_code = None
    for key, rec in headerless:
        if key in explicit_root:
            rec.root = False
    return records


def record_evidence(rec: LauncherRecord) -> Evidence | None:
    """A launcher record that died of a signal, as evidence of its own."""
    if rec.exit_code is None or rec.exit_code not in SIGNAL_EXIT:
        return None
    fault_class, role, _ = SIGNAL_EXIT[rec.exit_code]
    base = next(
        (e for e in rec.evidence if e.rule == "torchelastic.block_exitcode"), rec.evidence[0]
    )
    return base.model_copy(
        update={
            "rule": f"torchelastic.root_cause_signal{rec.exit_code}",
            "role": role if rec.root else "cascade",
            "fault_class": fault_class,
            "host": rec.host,
            "rank": rec.rank,
        }
    )


@dataclass(frozen=True)
class ProcessMap:
    """What NCCL's INFO lines say about the job's processes."""

    hosts_by_pid: dict[str, str]
    """A process id's host (the ``host:pid:tid`` prefix)."""
    hosts_by_rank: dict[int, str]
    """A global rank's host (the init line of the largest communicator)."""
    ranks_by_process: dict[str, int]
    """A process's global rank (its init line in the largest communicator), by ``host:pid``."""


def process_hosts(evidence: Sequence[Evidence]) -> ProcessMap:
    """Hosts and ranks NCCL's INFO lines name: a process id's host (their ``host:pid:tid``
    prefix), and from the init lines of the largest communicator (whose ranks are the global
    ranks) a rank's host and a process's rank."""
    by_pid: dict[str, str] = {}
    by_rank: dict[int, str] = {}
    rank_of: dict[str, int] = {}
    largest = 0
    for ev in evidence:
        if ev.rule != PROCESS_HOST_RULE or not ev.host:
            continue
        pid = ev.fields.get("pid")
        if pid:
            by_pid.setdefault(pid, ev.host)
        rank, size = ev.fields.get("comm_rank", ""), ev.fields.get("nranks", "")
        if is_ascii_digits(rank) and is_ascii_digits(size) and int(size) >= largest:
            if int(size) > largest:
                largest, by_rank, rank_of = int(size), {}, {}
            by_rank.setdefault(int(rank), ev.host)
            if pid:
                rank_of.setdefault(f"{ev.host}:{pid}", int(rank))
    return ProcessMap(by_pid, by_rank, rank_of)


def exit_code_of(ev: Evidence) -> int | None:
    """The exit code an exit report states (a signal as its negative number, -9 for SIGKILL)."""
    text = ev.fields.get("exit_code") or ev.fields.get("exit_status") or ""
    if is_ascii_digits(text.lstrip("-")):
        return int(text)
    if is_ascii_digits(ev.fields.get("signum", "")):
        return -int(ev.fields["signum"])
    if ev.rule == "memory.sigkill_worker" or ev.fields.get("signal") == "SIGKILL":
        return -9
    signal = ev.fields.get("signal", "")
    return -int(signal) if is_ascii_digits(signal) else None


def first_failure(
    records: Sequence[LauncherRecord], evidence: Sequence[Evidence], *, teardown: bool = False
) -> tuple[int, str | None] | None:
    """The rank (and host) that failed first, as the launcher reports it: torchelastic's
    root-cause record, else the first exit report (an agent's ``failed (exitcode: 1)
    local_rank: N``, a worker command line's ``--local_rank=N ... exits with return code``,
    srun's ``task N``, Ray Train's ``Worker N has failed``). A process taken down by a
    teardown signal names nobody, unless that teardown is itself what was diagnosed
    (``teardown``); exit reports of ranks on several hosts, all with one exit code, are the
    job failing alike and name nobody first."""
    for rec in records:
        if (
            rec.root
            and rec.rank is not None
            and (teardown or rec.exit_code not in TEARDOWN_EXIT_CODES)
        ):
            return rec.rank, rec.host
    reports = [
        ev
        for ev in print_order([e for e in evidence if e.rule in EXIT_REPORT_RULES])
        if ev.rank is not None and exit_code_of(ev) not in TEARDOWN_EXIT_CODES | {0}
    ]
    if len({ev.host for ev in reports}) > 1 and len({exit_code_of(ev) for ev in reports}) == 1:
        return None  # ranks on several hosts failing alike: the job failed, no rank first
    first = next(iter(reports), None)
    return (first.rank, first.host) if first is not None and first.rank is not None else None
