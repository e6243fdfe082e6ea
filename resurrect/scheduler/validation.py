"""Validation of values resurrect passes to scheduler commands.

Node names and drain reasons may originate in job logs or kernel messages, so they are
checked before they reach an argv: a strict charset for names, no control characters and a
length cap for reasons. Commands are always argv lists (never a shell), so this is defence in
depth against option injection (``-x``) and log/record forgery (newlines).
"""

from __future__ import annotations

import re

from resurrect.errors import InvalidSchedulerArgument

REASON_MAX = 200
_NODE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_JOB_ID_RE = re.compile(r"[0-9]{1,10}(?:_[0-9]{1,10})?")
# printable ASCII without characters slurm.conf-style parsers or shells treat specially
_REASON_FORBIDDEN = re.compile(r"[^\x20-\x7e]|[\"'`$\\;|&<>]")


def validate_node_name(name: str) -> str:
    """Return ``name`` if it is a plausible single Slurm node name, else raise."""
    if not isinstance(name, str) or not _NODE_RE.fullmatch(name):
        raise InvalidSchedulerArgument(f"invalid node name {name!r}")
    return name


def validate_node_names(names: list[str]) -> list[str]:
    """Validate each name; order kept, duplicates dropped."""
    return list(dict.fromkeys(validate_node_name(n) for n in names))


def validate_job_id(job_id: str) -> str:
    """Return ``job_id`` if it is a numeric Slurm job id (``123`` or array ``123_4``)."""
    if not isinstance(job_id, str) or not _JOB_ID_RE.fullmatch(job_id.strip()):
        raise InvalidSchedulerArgument(f"invalid job id {job_id!r}")
    return job_id.strip()


def sanitize_reason(reason: str) -> str:
    """A drain reason safe for ``Reason=``: forbidden characters become ``_``, runs of
    whitespace collapse, the result is capped at REASON_MAX characters. Empty -> error."""
    if not isinstance(reason, str):
        raise InvalidSchedulerArgument(f"reason must be a string, got {type(reason).__name__}")
    cleaned = _REASON_FORBIDDEN.sub("_", reason.replace("\n", " ").replace("\t", " "))
    cleaned = " ".join(cleaned.split())
    if not cleaned:
        raise InvalidSchedulerArgument("empty drain reason")
    return cleaned[:REASON_MAX]
