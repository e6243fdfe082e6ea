"""Parsing of Slurm's JSON (``squeue --json``, ``sinfo --json``, ``scontrol show ... --json``)
and of ``scontrol show job -o`` lines into resurrect's contracts.

Two shapes exist and both are accepted:

* Slurm 22.05 (OpenAPI v0.0.38 data): ``job_state`` is a string, numbers are plain ints,
  ``exit_code`` is a raw wait(2) status, node ``state`` is a string plus ``state_flags``.
* Slurm 23.02+ (v0.0.39 .. v0.0.42 data parsers, Debian 13's 24.11 emits v0.0.41/42):
  ``job_state`` and node ``state`` are lists of flags, numbers are
  ``{"set": bool, "infinite": bool, "number": int}`` objects, ``exit_code`` is
  ``{"status": [...], "return_code": {...}, "signal": {"id": {...}, "name": ...}}``.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from resurrect.contracts import FINISHED_JOB_STATES, JobInfo, JobState, NodeInfo
from resurrect.job_notes import JobNotes
from resurrect.numbers import ascii_int, is_ascii_digits
from resurrect.scheduler.hostlist import HostlistError, expand_hostlist

JsonObj = dict[str, Any]

log = logging.getLogger(__name__)
_UNREADABLE = JobNotes(log)

# Node base states (everything else in a state list is a flag).
NODE_BASE_STATES = frozenset(
    {"INVALID", "UNKNOWN", "DOWN", "IDLE", "ALLOCATED", "ERROR", "MIXED", "FUTURE"}
)
# Reasons meaning "held" in squeue/scontrol output.
HELD_REASONS = frozenset({"JobHeldAdmin", "JobHeldUser", "job_requeued_in_held_state"})
_JOB_STATE_VALUES = {s.value for s in JobState}
# Flags that may appear in a v0.0.40+ job_state list next to the base state.
_JOB_STATE_FLAGS = frozenset(
    {
        "LAUNCH_FAILED",
        "REQUEUED",
        "REQUEUE_HOLD",
        "SPECIAL_EXIT",
        "RESIZING",
        "CONFIGURING",
        "COMPLETING",
        "STOPPED",
        "RECONFIG_FAIL",
        "POWER_UP_NODE",
        "REVOKED",
        "REQUEUE_FED",
        "RESV_DEL_HOLD",
        "SIGNALING",
        "STAGE_OUT",
    }
)


class SlurmParseError(ValueError):
    """Slurm output did not have the expected shape."""


def number(value: Any) -> int | None:
    """A Slurm number in either shape: ``5`` or ``{"set": true, "number": 5}``; a string
    counts only as ASCII digits (``"12"``, ``"-1"``).

    Unset or infinite values, and anything else, give ``None``; never raises.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else None
    if isinstance(value, dict):
        if value.get("infinite") or not value.get("set", True):
            return None
        inner = value.get("number")
        if isinstance(inner, bool) or not isinstance(inner, int | float):
            return None
        return number(inner)
    if isinstance(value, str):
        return ascii_int(value, signed=True)
    return None


def timestamp(value: Any) -> datetime | None:
    """A UNIX timestamp in either shape; 0 / unset -> None."""
    n = number(value)
    if not n or n <= 0:
        return None
    try:
        return datetime.fromtimestamp(n, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _str_list(value: Any) -> list[str]:
    """A list of strings from a list, a comma string (csv_string) or nothing."""
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str) and v]
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return []


def _hosts(value: Any) -> list[str]:
    try:
        return expand_hostlist(_str(value))
    except HostlistError as exc:
        raise SlurmParseError(str(exc)) from exc


def parse_job_state(value: Any) -> tuple[JobState, list[str]]:
    """Base job state and extra flags from ``"RUNNING"`` or ``["PENDING", "REQUEUED"]``.

    A string may carry flags too (``scontrol``: ``JobState=PENDING`` with separate flags; some
    versions print ``COMPLETING`` alone). Unknown bases map to ``JobState.OTHER``.
    """
    items = [value] if isinstance(value, str) else _str_list(value)
    items = [i.upper() for i in items]
    flags = [i for i in items if i in _JOB_STATE_FLAGS]
    bases = [i for i in items if i not in _JOB_STATE_FLAGS]
    if bases and bases[0] in _JOB_STATE_VALUES:
        return JobState(bases[0]), flags
    if not bases and "COMPLETING" in flags:
        return JobState.COMPLETING, [f for f in flags if f != "COMPLETING"]
    if not bases and "REQUEUED" in flags:
        return JobState.REQUEUED, [f for f in flags if f != "REQUEUED"]
    return JobState.OTHER, flags


def parse_exit(value: Any) -> tuple[int | None, int | None]:
    """``(exit_code, signal)`` from a raw wait status int (22.05) or a verbose object (23.02+)."""
    if isinstance(value, dict):
        status = [s.upper() for s in _str_list(value.get("status"))]
        code = number(value.get("return_code"))
        sig_obj = value.get("signal")
        sig = number(sig_obj.get("id")) if isinstance(sig_obj, dict) else None
        if "PENDING" in status or "INVALID" in status:
            return None, None
        if "SIGNALED" in status or "CORE_DUMPED" in status:
            return code, sig or None
        return code, sig or None
    raw = number(value)
    if raw is None:
        return None, None
    if raw & 0x7F:
        return 0, raw & 0x7F
    return (raw >> 8) & 0xFF, None


# Slurm caps the zero padding of a filename pattern at 10 digits (slurmstepd's fname.c,
# MAX_WIDTH); a wider request pads to 10. A path longer than PATH_MAX is no file at all.
MAX_PATTERN_WIDTH = 10
MAX_OUTPUT_PATH = 4096
# What %a (and %b, modulo 10) of a job that is no array task gives: Slurm's NO_VAL.
NO_ARRAY_TASK = 4294967294
# Codes whose value is a number that a width pads with zeros; the others are text.
_NUMERIC_CODES = frozenset("jJAabnt")


class OutputPatternError(SlurmParseError):
    """A job's output pattern does not give a usable path (the job's note says why)."""


@dataclass(frozen=True)
class StepdNaming:
    """How one Slurm release's slurmstepd turns an output pattern into a file name, where
    releases differ (checked by running jobs on 22.05.8, 24.11.5 and 26.05.5; see
    docs/slurm-versions.md). A release between two checked ones follows the older one.

    Attributes:
        array_modulo: ``%b`` is the array task id modulo 10 (24.11, 26.05); 22.05 leaves
            ``%b`` as written and turns ``%2b`` into ``2b`` like any unknown code.
        keeps_unknown: an unknown code keeps its ``%`` and width (``%5q`` stays ``%5q``, a
            trailing ``%5`` stays ``%5``) and a lone trailing ``%`` is dropped (26.05); before,
            the ``%`` of an unknown code with a width is dropped (``5q``, ``5``) and a lone
            trailing ``%`` is kept.
    """

    array_modulo: bool
    keeps_unknown: bool


def stepd_naming(version: tuple[int, ...] | None) -> StepdNaming:
    """The naming rules of the slurmstepd of ``version`` (None: the newest checked)."""
    release = tuple(version[:2]) if version else (99, 0)
    return StepdNaming(array_modulo=release >= (24, 11), keeps_unknown=release >= (26, 5))


@dataclass(frozen=True)
class PatternValues:
    """What the codes of an output pattern stand for, for one job (its batch step).

    ``array_job_id``/``array_task_id`` are empty for a job that is no array task.
    ``first_node`` stands for ``%N``: 26.05's slurmstepd writes the node's name, 22.05's and
    24.11's the host's short name, the same where slurmd finds its node by its hostname
    (not with several slurmd on one host, as the local test cluster runs them).
    """

    job_id: str
    name: str
    user: str
    first_node: str
    work_dir: str
    array_job_id: str = ""
    array_task_id: str = ""

    def code(self, code: str, naming: StepdNaming) -> str | None:
        """The value of ``%<code>``, or None for a code this slurmstepd does not know."""
        task = self.array_task_id or str(NO_ARRAY_TASK)
        values = {
            "j": self.job_id,
            "J": self.job_id,  # the batch step: no ".<step>" suffix
            "A": self.array_job_id or self.job_id,
            "a": task,
            "x": self.name,
            "u": self.user,
            "N": self.first_node,
            "n": "0",
            "t": "0",
            "s": "batch",
        }
        if naming.array_modulo:
            values["b"] = str(int(task) % 10) if is_ascii_digits(task) else task
        return values.get(code)


_ASCII_DIGITS = frozenset("0123456789")


def _width(digits: str) -> int:
    # ASCII digits only (slurmstepd reads bytes with C's isdigit); more than a few digits
    # is more than MAX_PATTERN_WIDTH: never int() a long run
    return min(int(digits.lstrip("0")[:4] or "0"), MAX_PATTERN_WIDTH)


def _expand_codes(pattern: str, values: PatternValues, naming: StepdNaming) -> str:
    out: list[str] = []
    i, end = 0, len(pattern)
    while i < end:
        percent = pattern.find("%", i)
        if percent < 0:
            out.append(pattern[i:])
            break
        out.append(pattern[i:percent])
        j = percent + 1
        while j < end and pattern[j] in _ASCII_DIGITS:
            j += 1
        digits, code = pattern[percent + 1 : j], pattern[j : j + 1]
        i = j + len(code)
        value = "%" if code == "%" and not digits else values.code(code, naming)
        if value is None:  # an unknown code, a width on "%%", or a "%" at the end
            if naming.keeps_unknown:
                out.append(f"%{digits}{code}" if digits or code else "")
            else:
                out.append(f"{digits}{code}" if digits else f"%{code}")
        elif code in _NUMERIC_CODES and is_ascii_digits(value):
            out.append(value.zfill(_width(digits)))
        else:
            out.append(value)  # text: a width changes nothing
    return "".join(out)


def expand_output_pattern(
    pattern: str,
    *,
    job_id: str,
    name: str,
    user: str,
    first_node: str,
    work_dir: str,
    array_job_id: str = "",
    array_task_id: str = "",
    naming: StepdNaming | None = None,
) -> str:
    """Expand a job's output pattern (``sbatch -o``) into the path its batch step writes,
    as the slurmstepd of ``naming`` does (:func:`stepd_naming`; None: the newest checked):
    ``%j %J %A %a %b %x %u %N %n %t %s %%``, ``%<width>`` zero padding of numbers capped at
    :data:`MAX_PATTERN_WIDTH` digits, unknown codes as that release leaves them, and no
    expansion at all in a pattern holding a backslash (which Slurm then drops). A relative
    path is taken relative to the work dir.

    The pattern is the job owner's text: this never raises anything but
    :class:`OutputPatternError` (a result longer than ``PATH_MAX`` or holding a NUL).
    """
    if "\\" in pattern:
        out = pattern.replace("\\", "")
    else:
        values = PatternValues(
            job_id=job_id,
            name=name,
            user=user,
            first_node=first_node,
            work_dir=work_dir,
            array_job_id=array_job_id,
            array_task_id=array_task_id,
        )
        out = _expand_codes(pattern, values, naming or stepd_naming(None))
    if out and not out.startswith("/") and work_dir:
        out = work_dir.rstrip("/") + "/" + out
    if len(out) > MAX_OUTPUT_PATH:
        raise OutputPatternError(f"output path longer than {MAX_OUTPUT_PATH} characters")
    if "\x00" in out:
        raise OutputPatternError("output path holds a NUL character")
    return out


def default_output_pattern(array_job_id: str) -> str:
    """The pattern of a batch job that named no output: ``slurm-%A_%a.out`` for an array
    task, ``slurm-%j.out`` otherwise."""
    return "slurm-%A_%a.out" if array_job_id else "slurm-%j.out"


def array_ids(job: JsonObj) -> tuple[str, str]:
    """``(array job id, array task id)`` of an array task; ``("", "")`` for any other job
    (an array's record not yet split into tasks has the array id and no task id)."""
    array_job = number(job.get("array_job_id"))
    if not array_job:
        return "", ""
    task = number(job.get("array_task_id"))
    return str(array_job), "" if task is None or task == NO_ARRAY_TASK else str(task)


def client_expanded_paths_unreliable(job: JsonObj) -> bool:
    """True when the output paths of a 23.02+ job record must be read as patterns elsewhere.

    The v0.0.40-42 data parsers (all of 24.11's, 26.05's v0.0.42) print in
    ``standard_output``/``standard_error`` the path ``scontrol`` itself made of the pattern,
    which is not always the file slurmstepd writes: 24.11 leaves ``%N %t %n %s %J`` and a
    width beyond 10 digits half-expanded and expands behind a backslash; 26.05 prints
    ``(null)`` for ``%N`` before the job runs. A path holding none of ``%``, ``\\``,
    ``(null)``, of a job that is no unsplit array record, is what slurmstepd writes (it is
    its own pattern); v0.0.43+ print the pattern itself (next to ``stdout_expanded``)."""
    if "stdout_expanded" in job:
        return False
    array_job, task = array_ids(job)
    if array_job and not task:
        return True
    paths = (_str(job.get("standard_output")), _str(job.get("standard_error")))
    return any("%" in p or "\\" in p or "(null)" in p for p in paths)


def _outputs(
    job: JsonObj, info: dict[str, Any], naming: StepdNaming
) -> tuple[str | None, str | None, list[str]]:
    """stdout/stderr with patterns expanded (Slurm's defaults when the job set none), and
    notes on patterns that gave no usable path (that path is then unknown: None)."""
    work_dir = _str(job.get("current_working_directory"))
    array_job_id, array_task_id = array_ids(job)
    notes: list[str] = []

    def expand(pattern: str, which: str) -> str | None:
        if not pattern:
            return None
        try:
            return expand_output_pattern(
                pattern,
                job_id=info["job_id"],
                name=info["name"],
                user=info["user"],
                first_node=info["nodes"][0] if info["nodes"] else "",
                work_dir=work_dir,
                array_job_id=array_job_id,
                array_task_id=array_task_id,
                naming=naming,
            )
        except OutputPatternError as exc:
            notes.append(f"{which} path unknown: {exc}")
            return None

    stdout_pat = _str(job.get("standard_output"))
    stderr_pat = _str(job.get("standard_error"))
    if not job.get("batch_flag", True):
        return expand(stdout_pat, "stdout"), expand(stderr_pat, "stderr"), notes
    if not stdout_pat and work_dir:
        stdout_pat = default_output_pattern(array_job_id)
    stdout = expand(stdout_pat, "stdout")
    stderr = expand(stderr_pat, "stderr") if stderr_pat else stdout
    return stdout, stderr, notes


def parse_job(job: JsonObj, naming: StepdNaming | None = None) -> JobInfo:
    """One job object of ``squeue --json`` (either shape) as a JobInfo; its output patterns
    expanded as the slurmstepd of ``naming`` does (None: the newest checked release)."""
    if not isinstance(job, dict) or number(job.get("job_id")) is None:
        raise SlurmParseError("job entry without a numeric job_id")
    state, _flags = parse_job_state(job.get("job_state"))
    reason = _str(job.get("state_reason"))
    if reason == "None":
        reason = ""
    priority = number(job.get("priority"))
    held = bool(job.get("hold")) or priority == 0 or reason in HELD_REASONS
    if state not in (JobState.PENDING, JobState.COMPLETING):
        # a requeuehold'd job whose steps are still being killed shows COMPLETING, priority 0
        held = False
    nodes = _hosts(job.get("nodes"))
    exit_code, exit_signal = (None, None)
    if state in FINISHED_JOB_STATES:
        exit_code, exit_signal = parse_exit(job.get("exit_code"))
    info: dict[str, Any] = {
        "job_id": str(number(job.get("job_id"))),
        "name": _str(job.get("name")),
        "user": _str(job.get("user_name")),
        "nodes": nodes,
    }
    stdout, stderr, notes = _outputs(job, info, naming or stepd_naming(None))
    num_nodes = number(job.get("node_count"))
    if num_nodes is None:
        num_nodes = len(nodes)
    start = timestamp(job.get("start_time")) if state is not JobState.PENDING else None
    # a COMPLETING job's end time tells an attempt that ended from one requeued while it is
    # torn down (Slurm clears the end time with the requeue: JobInfo.requeued_while_completing)
    ended = state in FINISHED_JOB_STATES or state is JobState.COMPLETING
    end = timestamp(job.get("end_time")) if ended else None
    return JobInfo(
        job_id=info["job_id"],
        name=info["name"],
        state=state,
        state_reason=reason,
        user=info["user"],
        user_id=number(job.get("user_id")),
        group_id=number(job.get("group_id")),
        partition=_str(job.get("partition")),
        nodes=nodes,
        excluded_nodes=_hosts(job.get("excluded_nodes")),
        num_nodes=num_nodes,
        restart_count=number(job.get("restart_cnt")) or 0,
        requeue_allowed=bool(job.get("requeue", True)),
        held=held,
        comment=_str(job.get("comment")),
        admin_comment=_str(job["admin_comment"]) if "admin_comment" in job else None,
        stdout_path=stdout,
        stderr_path=stderr,
        work_dir=_str(job.get("current_working_directory")) or None,
        exit_code=exit_code,
        exit_signal=exit_signal,
        start_time=start,
        end_time=end,
        notes=notes,
        submit_time=timestamp(job.get("submit_time")),
    )


def parse_jobs(doc: JsonObj, naming: StepdNaming | None = None) -> list[JobInfo]:
    """All jobs of a ``squeue --json`` (or ``scontrol show job --json``) document.

    One job whose record cannot be read, whatever the failure, is left out (and noted,
    rate-limited), so that one job's odd data never hides the others; only a document none
    of whose jobs can be read is an error."""
    _raise_embedded_errors(doc)
    jobs = doc.get("jobs")
    if not isinstance(jobs, list):
        raise SlurmParseError("no 'jobs' list in Slurm JSON")
    parsed: list[JobInfo] = []
    first_error: Exception | None = None
    for entry in jobs:
        try:
            parsed.append(parse_job(entry, naming))
        except Exception as exc:  # the job's own data: it costs that record alone
            first_error = first_error or exc
            job_id = entry.get("job_id") if isinstance(entry, dict) else None
            _UNREADABLE.note(str(number(job_id)), f"job record left out: {why_unreadable(exc)}")
    if first_error is not None and not parsed:
        raise SlurmParseError(f"no job record could be read: {first_error}") from first_error
    return parsed


def why_unreadable(exc: BaseException) -> str:
    """A short note text for a failure reading one record (type names of errors that are
    no SlurmParseError: a bug shows as what it is)."""
    text = str(exc)[:200]
    if isinstance(exc, SlurmParseError | ValidationError):
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def parse_node_state(state: Any, state_flags: Any = None) -> tuple[str, list[str]]:
    """Base state and flags from ``"idle"`` + ``["DRAIN"]`` (22.05) or ``["IDLE", "DRAIN"]``.

    22.05 may also print compound strings such as ``"down*"`` or ``"idle+drain"``.
    """
    items: list[str] = []
    if isinstance(state, str):
        items = [p for p in re.split(r"[+]", state.upper().rstrip("*~#!%$@^-")) if p]
        if state.endswith("*"):
            items.append("NOT_RESPONDING")
    else:
        items = [s.upper() for s in _str_list(state)]
    items += [f.upper() for f in _str_list(state_flags)]
    base = next((i for i in items if i in NODE_BASE_STATES), "UNKNOWN")
    flags = list(dict.fromkeys(i for i in items if i != base))
    return base, flags


def parse_node(node: JsonObj) -> NodeInfo:
    """One node object of ``sinfo --json`` (22.05) / ``scontrol show node --json`` (23.02+)."""
    if not isinstance(node, dict) or not _str(node.get("name")):
        raise SlurmParseError("node entry without name")
    base, flags = parse_node_state(node.get("state"), node.get("state_flags"))
    return NodeInfo(
        name=_str(node.get("name")),
        state=base,
        flags=flags,
        reason=_str(node.get("reason")),
        partitions=_str_list(node.get("partitions")),
    )


def parse_nodes(doc: JsonObj) -> list[NodeInfo]:
    """All nodes of a ``sinfo --json`` (22.05) or ``scontrol show node --json`` document."""
    _raise_embedded_errors(doc)
    nodes = doc.get("nodes")
    if not isinstance(nodes, list):
        raise SlurmParseError("no 'nodes' list in Slurm JSON")
    return [parse_node(n) for n in nodes]


def embedded_errors(doc: Any) -> list[str]:
    """The texts of the ``errors`` list Slurm puts in its JSON (22.05 exits 0 with them when
    slurmctld is unreachable: ``Failed while looking for jobs`` / ``Unspecified error``)."""
    if not isinstance(doc, dict):
        return ["Slurm JSON is not an object"]
    errors = doc.get("errors")
    if not isinstance(errors, list):
        return []
    texts = []
    for e in errors:
        if isinstance(e, dict):
            parts = [_str(e.get("description")), _str(e.get("error")), _str(e.get("source"))]
            texts.append(": ".join(p for p in parts if p) or str(e))
        else:
            texts.append(str(e))
    return texts


def unanswered(doc: JsonObj) -> bool:
    """True when a 23.02+ job document was not filled by slurmctld: ``scontrol show job
    --json`` of 24.11 and 26.05 exits 0 with no jobs, no errors and ``last_update`` 0 when it
    cannot reach slurmctld. (One job read by id has ``last_update`` 0 too, with its job;
    22.05's documents have no ``last_update``.)"""
    return "last_update" in doc and not number(doc.get("last_update")) and not doc.get("jobs")


def _raise_embedded_errors(doc: Any) -> None:
    texts = embedded_errors(doc)
    if texts:
        raise SlurmParseError("; ".join(texts))


def parse_scontrol_record(line: str) -> dict[str, str]:
    """``scontrol show job -o`` / ``show node -o`` one-line record -> ``{Key: value}``.

    Values may contain spaces (``Reason=resurrect: gpu x``); a token starting a new key is
    ``Word=``, so text between keys belongs to the previous value.
    """
    out: dict[str, str] = {}
    key: str | None = None
    for token in line.strip().split(" "):
        m = re.match(r"^([A-Za-z][A-Za-z0-9_:/.()]*)=(.*)$", token)
        if m and (key is None or m.group(1) not in out):
            key = m.group(1)
            out[key] = m.group(2)
        elif key is not None:
            out[key] = f"{out[key]} {token}" if token else out[key]
    return out
