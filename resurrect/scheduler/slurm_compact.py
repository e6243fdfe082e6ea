"""Compact, server-filtered Slurm reads: ``squeue -h -O ...`` / ``sinfo -h -N -o ...`` lines.

On Slurm 22.05 ``squeue --json`` and ``sinfo --json`` ignore every filter and return every
job (~1.3-2.7 KB each) and node: at 50,000 queued jobs that is 65-133 MB per poll. The
compact text forms honour ``--states``/``-j``/``-n`` and cost ~60 bytes a job, so a poll costs
what is running and what just ended, not what is queued.

Trust: a job's owner writes its name, comment, output paths and work dir, and Slurm puts
them in its output as they are (newlines and ``|`` included), so one line holding several
of them cannot be split safely. The multi-job query (:data:`JOB_FIELDS`) therefore holds
only fields the owner cannot write (ids, states, counts, node lists, the partition); the
owner-written ones are read one field per command for one job at a time
(:data:`OWNER_FIELDS`), where the whole output is that one value. Lines that do not have
the exact shape of a record are left out (and noted), never guessed at.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from resurrect.contracts import JobState, NodeInfo
from resurrect.job_notes import JobNotes
from resurrect.scheduler.hostlist import HostlistError, expand_hostlist
from resurrect.scheduler.slurm_json import SlurmParseError, parse_node_state, why_unreadable

log = logging.getLogger(__name__)
_UNREADABLE = JobNotes(log)

DELIMITER = "|"

# squeue --Format fields the job owner cannot write, in output order (``Name:|``: no
# padding, ``|`` after each). Names as in squeue(1) of 22.05 and 24.11.
JOB_FIELDS: tuple[str, ...] = (
    "JobID",
    "ArrayJobID",
    "ArrayTaskID",
    "State",
    "Reason",
    "RestartCnt",
    "NodeList",
    "NumNodes",
    "UserID",
    "GroupID",
    "UserName",
    "Partition",
    "PriorityLong",
    "Requeue",
    "BatchFlag",
    "exit_code",
    "StartTime",
    "EndTime",
    "SubmitTime",
)

# Owner-written fields, read one per command for one job: JobInfo field -> squeue argv tail.
# ``%x`` (excluded nodes) has no --Format name on 22.05.
OWNER_FIELDS: dict[str, tuple[str, ...]] = {
    "name": ("-O", "Name:0"),
    "comment": ("-O", "Comment:0"),
    "standard_output": ("-O", "STDOUT:0"),
    "standard_error": ("-O", "STDERR:0"),
    "current_working_directory": ("-O", "WorkDir:0"),
    "excluded_nodes": ("-o", "%x"),
}

# Job states a watcher must see: running, and every state a job can fail in (squeue keeps
# ended jobs for MinJobAge). Pending jobs are what makes a queue big, and are left out, as
# are normally ended ones (COMPLETED, CANCELLED), which never make an interruption.
WATCHED_JOB_STATES: tuple[str, ...] = (
    "RUNNING",
    "COMPLETING",
    "SUSPENDED",
    "STOPPED",
    "NODE_FAIL",
    "FAILED",
    "TIMEOUT",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
)

# sinfo -t names of the node states in which a node is unavailable (NodeInfo.unavailable).
UNHEALTHY_NODE_STATES: tuple[str, ...] = ("down", "fail", "no_respond", "unknown", "future")
# sinfo -N -O: one line per (node, partition); StateComplete keeps every flag (``%T`` shows
# a down+drain node as "drained"); the reason (operator/resurrect text) last, unpadded.
NODE_FORMAT = "NodeList:|,StateComplete:|,Partition:|,Reason:0"

_JOB_ID = re.compile(r"^[0-9]{1,12}$")
_NUMBER = re.compile(r"^[0-9]{1,20}$")
_TEXT = re.compile(r"^[^\x00-\x1f|]*$")  # one field of Slurm's own text
_EXIT = re.compile(r"^[0-9:]*$")
_NODES = re.compile(r"^[A-Za-z0-9_.,\[\]\-]*$")
_NAME = re.compile(r"^[A-Za-z0-9_.@\-]*$")
_STATE_VALUES = {s.value for s in JobState}


class CompactParseError(SlurmParseError):
    """A compact line did not have the shape of a record."""


def job_rows_argv(
    *, states: tuple[str, ...] | None = None, job_ids: list[str] | None = None
) -> list[str]:
    """``squeue`` argv for the fixed fields of the jobs in ``states`` or with ``job_ids``."""
    fmt = ",".join(f"{name}:{DELIMITER}" for name in JOB_FIELDS)
    argv = ["squeue", "-h", "-O", fmt]
    if states:
        argv.append("--states=" + ",".join(states))
    if job_ids:
        # without --states squeue hides ended jobs even when asked for them by id
        argv += ["--jobs=" + ",".join(job_ids), "--states=all"]
    return argv


def owner_field_argv(job_id: str, field: str) -> list[str]:
    """``squeue`` argv printing one owner-written field of one job, and nothing else."""
    return ["squeue", "-h", f"--jobs={job_id}", "--states=all", *OWNER_FIELDS[field]]


def nodes_argv(
    *, states: tuple[str, ...] | None = None, names: list[str] | None = None
) -> list[str]:
    argv = ["sinfo", "-h", "-N", "-O", NODE_FORMAT]
    if states:
        argv.append("--states=" + ",".join(states))
    if names:
        argv.append("--nodes=" + ",".join(names))
    return argv


@dataclass(frozen=True)
class JobRow:
    """The fixed (not owner-written) fields of one job, as one compact line gave them."""

    job_id: str
    array_task: str  # "<array job id>_<task id>" for an array task, else ""
    state: JobState
    flags: tuple[str, ...]
    reason: str
    restart_count: int
    nodes: tuple[str, ...]
    num_nodes: int
    user_id: int | None
    group_id: int | None
    user: str
    partition: str
    priority: int | None
    requeue: bool
    batch: bool
    exit_code: str
    start_time: int | None
    end_time: int | None
    submit_time: int | None = None

    @property
    def query_id(self) -> str:
        """The id that names this job alone in ``squeue --jobs`` (an array task's raw id
        may equal its array's id, which names every task)."""
        return self.array_task or self.job_id

    def json_fields(self) -> dict[str, Any]:
        """This row as the keys of a ``squeue --json`` job (22.05 shape), so that one
        parser (:func:`resurrect.scheduler.slurm_json.parse_job`) decides what it means."""
        array_job, _, task = self.array_task.partition("_")
        return {
            "job_id": int(self.job_id),
            "array_job_id": int(array_job) if array_job else 0,
            "array_task_id": int(task) if task else None,
            "job_state": [self.state.value, *self.flags],
            "state_reason": self.reason,
            "restart_cnt": self.restart_count,
            "nodes": ",".join(self.nodes),
            "node_count": self.num_nodes,
            "user_id": self.user_id,
            "group_id": self.group_id,
            "user_name": self.user,
            "partition": self.partition,
            "priority": self.priority,
            "requeue": self.requeue,
            "batch_flag": self.batch,
            "exit_code": _wait_status(self.exit_code),
            "start_time": self.start_time or 0,
            "end_time": self.end_time or 0,
            "submit_time": self.submit_time or 0,
        }


def _wait_status(text: str) -> int | None:
    """squeue's exit_code as a raw wait(2) status, like 22.05 JSON: 22.05 prints the raw
    status (``768`` for exit 3, ``9`` for SIGKILL); ``code:signal`` is read too."""
    parts = text.split(":")
    if not text or len(parts) > 2 or not all(_NUMBER.fullmatch(p) for p in parts):
        return None
    if len(parts) == 1:
        return int(parts[0]) & 0xFFFF
    code, sig = int(parts[0]) & 0xFF, int(parts[1]) & 0x7F
    return sig if sig else code << 8


def _time(text: str) -> int | None:
    """squeue's local ``2026-11-30T06:32:09`` as a UNIX time; ``N/A``/``Unknown`` -> None."""
    try:
        stamp = datetime.fromisoformat(text)
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.astimezone()  # squeue prints the local time
    return int(stamp.astimezone(UTC).timestamp())


def _optional_int(text: str) -> int | None:
    return int(text) if _NUMBER.fullmatch(text) else None


def _job_state(text: str) -> tuple[JobState, tuple[str, ...]]:
    # 22.05 prints one word; newer versions may add flags after "+" / ","
    words = [w for w in re.split(r"[+,]", text.upper()) if w]
    if not words or words[0] not in _STATE_VALUES:
        raise CompactParseError(f"unknown job state {text[:40]!r}")
    return JobState(words[0]), tuple(words[1:])


def parse_job_row(line: str) -> JobRow:
    """One line of :func:`job_rows_argv` output; raises CompactParseError on any surprise."""
    parts = line.split(DELIMITER)
    if len(parts) != len(JOB_FIELDS) + 1 or parts[-1] != "":
        raise CompactParseError(f"{len(parts) - 1} fields, expected {len(JOB_FIELDS)}")
    f = dict(zip(JOB_FIELDS, (p.strip() for p in parts), strict=False))
    if not _JOB_ID.fullmatch(f["JobID"]):
        raise CompactParseError(f"bad job id {f['JobID'][:40]!r}")
    for key, shape in (("Reason", _TEXT), ("Partition", _TEXT), ("exit_code", _EXIT)):
        if not shape.fullmatch(f[key]):
            raise CompactParseError(f"bad {key} {f[key][:40]!r}")
    if not _NAME.fullmatch(f["UserName"]) or not _NODES.fullmatch(f["NodeList"]):
        raise CompactParseError("bad user name or node list")
    state, flags = _job_state(f["State"])
    try:
        nodes = tuple(expand_hostlist(f["NodeList"])) if f["NodeList"] else ()
    except HostlistError as exc:
        raise CompactParseError(str(exc)) from exc
    reason = "" if f["Reason"] == "None" else f["Reason"]
    array_task = ""
    if _JOB_ID.fullmatch(f["ArrayJobID"]) and _JOB_ID.fullmatch(f["ArrayTaskID"]):
        array_task = f"{f['ArrayJobID']}_{f['ArrayTaskID']}"
    return JobRow(
        job_id=f["JobID"],
        array_task=array_task,
        state=state,
        flags=flags,
        reason=reason,
        restart_count=_optional_int(f["RestartCnt"]) or 0,
        nodes=nodes,
        num_nodes=_optional_int(f["NumNodes"]) or len(nodes),
        user_id=_optional_int(f["UserID"]),
        group_id=_optional_int(f["GroupID"]),
        user=f["UserName"],
        partition=f["Partition"],
        priority=_optional_int(f["PriorityLong"]),
        requeue=f["Requeue"] != "0",
        batch=f["BatchFlag"] != "0",
        exit_code=f["exit_code"],
        start_time=_time(f["StartTime"]),
        end_time=_time(f["EndTime"]),
        submit_time=_time(f["SubmitTime"]),
    )


def parse_job_rows(text: str) -> list[JobRow]:
    """Every well-formed line of :func:`job_rows_argv` output. A malformed line (whatever
    fails in reading it) is left out and noted (rate-limited): it cannot be owner text (the
    query holds none), so it is an unexpected Slurm format, and one odd record must not hide
    the others."""
    rows: list[JobRow] = []
    seen: set[str] = set()
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            row = parse_job_row(line)
        except Exception as exc:  # that line's own data: it costs that line alone
            note = f"squeue line left out: {why_unreadable(exc)}"
            _UNREADABLE.note(line.split(DELIMITER, 1)[0][:20], note)
            continue
        if row.job_id in seen:  # only possible if Slurm's format changed: trust neither
            rows = [r for r in rows if r.job_id != row.job_id]
            _UNREADABLE.note(row.job_id, "squeue printed the job twice: left out")
            continue
        seen.add(row.job_id)
        rows.append(row)
    return rows


def note_unreadable(job_id: str, why: str) -> None:
    """Note (rate-limited, per job) that a job's compact record was left out."""
    _UNREADABLE.note(job_id, why)


def owner_field_value(field: str, stdout: str) -> Any:
    """The value of one owner-written field from the whole output of
    :func:`owner_field_argv` (Slurm prints ``(null)`` for an unset string)."""
    value = stdout[:-1] if stdout.endswith("\n") else stdout
    if field == "excluded_nodes":
        value = value.strip()
    return "" if value == "(null)" else value


def output_pattern(printed: str, *, job_id: str, array_task: str, work_dir: str) -> str:
    """The output pattern of a job from what ``squeue -O STDOUT:0`` (or ``STDERR:0``)
    printed for it (:func:`owner_field_value`): the pattern as its owner wrote it, except
    that 22.05 prints, for a job that named no output, ``<work dir>/slurm-<job id>.out``,
    which for an array task (``array_task``) is not its file (``slurm-%A_%a.out``): that
    reads as no pattern. (No owner can name that path before the job has its id.)"""
    if array_task and printed == f"{work_dir.rstrip('/')}/slurm-{job_id}.out":
        return ""
    return printed


def parse_node_lines(text: str) -> list[NodeInfo]:
    """Nodes of :func:`nodes_argv` output (one line per node and partition, merged)."""
    nodes: dict[str, NodeInfo] = {}
    for line in text.splitlines():
        parts = line.split(DELIMITER, 3)
        if len(parts) != 4 or not _NAME.fullmatch(parts[0]) or not parts[0]:
            _UNREADABLE.note(line[:20], "sinfo line left out: not NAME|STATE|PARTITION|REASON")
            continue
        name, state_text, partition, reason = parts
        base, flags = parse_node_state(state_text.strip())
        partition = partition.strip().rstrip("*")
        reason = "" if reason.strip() == "none" else reason.strip()
        known = nodes.get(name)
        if known is None:
            nodes[name] = NodeInfo(
                name=name,
                state=base,
                flags=flags,
                reason=reason,
                partitions=[partition] if partition else [],
            )
        elif partition and partition not in known.partitions:
            known.partitions.append(partition)
    return list(nodes.values())
