"""Slurm's compact text output, rendered from JSON job and node records.

A stand-in for ``squeue -h -O ...`` / ``squeue -o %x`` / ``sinfo -h -N -o ...`` /
``scontrol show job --json ID`` for unit tests, fuzzing and benchmarks: it prints what the
real commands print for the same records (field by field as checked on Slurm 22.05), with
their filters (``--states``, ``--jobs``, ``--nodes``) applied. Both JSON shapes (22.05 and
23.02+) are accepted as input.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from resurrect.scheduler import slurm_compact as compact
from resurrect.scheduler.slurm_json import number, parse_job_state, parse_node_state

JsonObj = dict[str, Any]

_NODE_STATE_NAMES = {
    "down": {"DOWN"},
    "fail": {"FAIL"},
    "no_respond": {"NOT_RESPONDING"},
    "unknown": {"UNKNOWN"},
    "future": {"FUTURE"},
    "drain": {"DRAIN", "DRAINED", "DRAINING"},
}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _num(value: Any) -> str:
    n = number(value)
    return "" if n is None else str(n)


def _time(value: Any) -> str:
    n = number(value)
    if not n or n <= 0:
        return "N/A"
    return datetime.fromtimestamp(n).strftime("%Y-%m-%dT%H:%M:%S")  # local, as squeue


def _exit(value: Any) -> str:
    """squeue 22.05 prints the raw wait status (``768`` for exit 3)."""
    if isinstance(value, dict):
        code = number(value.get("return_code")) or 0
        sig_obj = value.get("signal")
        sig = number(sig_obj.get("id")) if isinstance(sig_obj, dict) else None
        return str(sig if sig else (code & 0xFF) << 8)
    raw = number(value)
    return "" if raw is None else str(raw)


def _state(job: JsonObj) -> str:
    return parse_job_state(job.get("job_state"))[0].value


def job_fields(job: JsonObj) -> dict[str, str]:
    """The :data:`~resurrect.scheduler.slurm_compact.JOB_FIELDS` of one JSON job, as text."""
    task = number(job.get("array_task_id"))
    array_job = number(job.get("array_job_id"))
    reason = _text(job.get("state_reason")) or "None"
    return {
        "JobID": _num(job.get("job_id")),
        "ArrayJobID": str(array_job) if array_job else _num(job.get("job_id")),
        "ArrayTaskID": str(task) if task is not None and array_job else "N/A",
        "State": _state(job),
        "Reason": reason,
        "RestartCnt": _num(job.get("restart_cnt")) or "0",
        "NodeList": _text(job.get("nodes")),
        "NumNodes": _num(job.get("node_count")),
        "UserID": _num(job.get("user_id")),
        "GroupID": _num(job.get("group_id")),
        "UserName": _text(job.get("user_name")),
        "Partition": _text(job.get("partition")),
        "PriorityLong": _num(job.get("priority")),
        "Requeue": "1" if job.get("requeue", True) else "0",
        "BatchFlag": "1" if job.get("batch_flag", True) else "0",
        "exit_code": _exit(job.get("exit_code")),
        "StartTime": _time(job.get("start_time")),
        "SubmitTime": _time(job.get("submit_time")),
        "EndTime": _time(job.get("end_time")),
    }


def job_row_line(job: JsonObj) -> str:
    fields = job_fields(job)
    return "".join(f"{fields[name]}{compact.DELIMITER}" for name in compact.JOB_FIELDS)


def owner_field_text(job: JsonObj, field: str) -> str:
    """What ``squeue -h --jobs=ID -O <field>:0`` (or ``-o %x``) prints for ``job``."""
    value = job.get(field)
    if field == "excluded_nodes":
        text = value if isinstance(value, str) else ",".join(value or [])
        return text + "\n"
    text = _text(value)
    if field == "standard_error" and not text:
        text = _text(job.get("standard_output"))  # squeue shows stdout's path
    return (text or "(null)") + "\n"


def _option(argv: Sequence[str], name: str) -> list[str] | None:
    for arg in argv:
        if arg.startswith(f"--{name}="):
            return [v for v in arg.split("=", 1)[1].split(",") if v]
    return None


def _matches_id(job: JsonObj, wanted: list[str]) -> bool:
    job_id = _num(job.get("job_id"))
    array_job = number(job.get("array_job_id"))
    task = number(job.get("array_task_id"))
    names = {job_id}
    if array_job:
        names |= {str(array_job), f"{array_job}_{task}"}
    return bool(names & set(wanted))


# what slurmctld answers for a job id it does not know
_INVALID_JOB_ID = (1, "", "slurm_load_jobs error: Invalid job id specified")


class SlurmText:
    """Answers Slurm client argv from JSON documents: ``(returncode, stdout, stderr)``.

    ``major`` is the Slurm version it plays (22: ``squeue --json`` ignores filters;
    23+: ``scontrol show job --json ID`` shows that job).
    """

    def __init__(self, jobs: list[JsonObj], nodes: list[JsonObj], major: int = 22) -> None:
        self.jobs = jobs
        self.nodes = nodes
        self.major = major

    def answer(self, argv: Sequence[str]) -> tuple[int, str, str] | None:
        """The output of ``argv``, or None for a command this stand-in does not play."""
        # ``--json=v0.0.42``: the data parser asked for by name reads the same here
        args = ["--json" if a.startswith("--json=") else a for a in argv]
        if args[:2] == ["squeue", "--json"] or args == ["scontrol", "show", "job", "--json"]:
            return 0, json.dumps({"jobs": self.jobs, "errors": []}), ""
        if args[:3] == ["scontrol", "show", "job"] and len(args) == 5 and args[3] == "--json":
            return self._show_job(args[4])
        if args[:2] == ["sinfo", "--json"] or args == ["scontrol", "show", "node", "--json"]:
            return 0, json.dumps({"nodes": self.nodes, "errors": []}), ""
        if args[:2] == ["squeue", "-h"]:
            return self._squeue(args)
        if args[:3] == ["sinfo", "-h", "-N"]:
            return self._sinfo(args)
        return None

    def _show_job(self, job_id: str) -> tuple[int, str, str]:
        """``scontrol show job --json ID``."""
        chosen = [j for j in self.jobs if _matches_id(j, [job_id])]
        if not chosen:
            return _INVALID_JOB_ID
        return 0, json.dumps({"jobs": chosen, "errors": []}), ""

    def _squeue(self, args: list[str]) -> tuple[int, str, str]:
        wanted = _option(args, "jobs")
        states = _option(args, "states")
        jobs = self.jobs
        if wanted is not None:
            jobs = [j for j in jobs if _matches_id(j, wanted)]
            if not jobs and len(wanted) == 1:
                return _INVALID_JOB_ID
        if states is not None and states != ["all"]:
            jobs = [j for j in jobs if _state(j) in {s.upper() for s in states}]
        for field, tail in compact.OWNER_FIELDS.items():
            if args[-2:] == list(tail):
                return 0, "".join(owner_field_text(j, field) for j in jobs), ""
        return 0, "".join(job_row_line(j) + "\n" for j in jobs), ""

    def _sinfo(self, args: list[str]) -> tuple[int, str, str]:
        names = _option(args, "nodes")
        states = _option(args, "states")
        lines = []
        for node in self.nodes:
            name = _text(node.get("name"))
            if names is not None and name not in names:
                continue
            base, flags = parse_node_state(node.get("state"), node.get("state_flags"))
            if states is not None:
                have = {base, *flags}
                if not any(_NODE_STATE_NAMES.get(s.lower(), set()) & have for s in states):
                    continue
            text = "+".join([base.lower(), *(f.lower() for f in flags)])
            reason = _text(node.get("reason")) or "none"
            partitions = node.get("partitions") or [""]
            if "NodeList:0" in args:  # names only
                lines += [f"{name}\n" for _ in partitions]
                continue
            lines += [f"{name}|{text}|{p}|{reason}\n" for p in partitions]
        return 0, "".join(lines), ""
