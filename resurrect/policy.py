"""Which jobs resurrect recovers, and with what policy.

A job opts in through its Slurm comment, a JSON object with a ``resurrect`` key::

    sbatch --comment '{"resurrect": {"max_restarts": 2, "checkpoint_dir": "/ckpt/run7"}}'

(``{"resurrect": true}`` opts in with the operator's policy; ``{"resurrect": false}`` opts
out even where the partition default opts in.) Otherwise the partition default from the
config applies, else the global default (opt-in only: disabled).

The comment is written by the job's owner and is untrusted: it is parsed as strict JSON
(size-capped; integers, floats and nesting bounded; no NaN, no duplicate keys, no lone
surrogates), validated by :class:`JobPolicy` (unknown keys are errors), never evaluated,
and it can only make recovery *more conservative* than the operator's policy (see the
table on :class:`JobPolicy`): a request beyond that is not granted and is noted.

A comment that mentions resurrect but is malformed means **not opted in**: resurrect will
not act on a job whose owner's intent it cannot read. The reason is returned in
``problems`` (the sensors log it once per job; a recovery records it in its notes).
Nothing here raises: whatever the comment holds, the answer is a :class:`PolicyResolution`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import ValidationError

from resurrect.config import ResurrectConfig
from resurrect.contracts import (
    Contract,
    JobInfo,
    JobPolicy,
    LemonAction,
    ProgressPolicy,
    RecoveryMode,
)
from resurrect.errors import PolicyError
from resurrect.job_notes import printable

MAX_COMMENT_BYTES = 16 * 1024
MAX_INT_DIGITS = 18  # fits an int64; Python would accept 4,300 digits (and choke beyond)
MAX_DEPTH = 16
_MODE_RANK: dict[RecoveryMode, int] = {"observe": 0, "act": 1}
_LEMON_RANK: dict[LemonAction, int] = {"flag": 0, "exclude": 1, "drain": 2}

PolicySource = Literal["comment", "partition", "default", "malformed_comment"]


class PolicyResolution(Contract):
    policy: JobPolicy
    source: PolicySource
    # What was wrong with the comment, or which of its requests were not granted.
    problems: list[str] = []

    @property
    def opted_in(self) -> bool:
        return self.policy.enabled


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise PolicyError(f"an integer of {len(text)} digits")
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise PolicyError(f"a number out of range ({text[:20]})")
    return value


def _no_constant(text: str) -> Any:
    raise PolicyError(f"{text} is not a number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document: dict[str, Any] = {}
    for key, value in pairs:
        if key in document:
            raise PolicyError(f"the key '{printable(key, 40)}' appears twice")
        document[key] = value
    return document


def _check_strings(value: Any, depth: int = 0) -> None:
    """Bounded nesting; every string is valid Unicode (no lone surrogates from ``\\ud800``)."""
    if depth > MAX_DEPTH:
        raise PolicyError(f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise PolicyError("a string that is not valid Unicode") from exc
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_strings(key, depth + 1)
            _check_strings(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_strings(item, depth + 1)


def parse_comment_json(comment: str) -> Any:
    """The comment as strict JSON; :class:`PolicyError` says why it is not."""
    if len(comment.encode("utf-8", "replace")) > MAX_COMMENT_BYTES:
        raise PolicyError(f"longer than {MAX_COMMENT_BYTES} bytes")
    try:
        document = json.loads(
            comment,
            parse_int=_bounded_int,
            parse_float=_finite_float,
            parse_constant=_no_constant,
            object_pairs_hook=_unique_keys,
        )
    except PolicyError:
        raise
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise PolicyError(f"not JSON ({exc.__class__.__name__}: {str(exc)[:120]})") from exc
    _check_strings(document)
    return document


def _requested(section: Mapping[str, Any]) -> JobPolicy:
    """The comment's own settings, validated strictly (no "3" for 3, no unknown keys)."""
    try:
        return JobPolicy.model_validate(dict(section), strict=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "resurrect"
        raise PolicyError(f"field '{printable(field, 60)}': {first['msg']}") from exc


# Settings a comment may only lower, or only raise: either way, fewer or later restarts.
_AT_MOST = frozenset(
    {"max_restarts", "no_progress_restarts", "free_restarts_per_window", "max_free_restarts"}
)
_AT_LEAST = frozenset({"free_restart_window_s"})


def narrow(
    base: JobPolicy, asked: JobPolicy, fields: set[str], cluster_mode: RecoveryMode
) -> tuple[JobPolicy, list[str]]:
    """``base`` changed by the comment's ``fields`` of ``asked``, only where that is more
    conservative; the second value says which requests were not granted and why."""
    update: dict[str, Any] = {"enabled": asked.enabled if "enabled" in fields else True}
    refused: list[str] = []
    if "mode" in fields and asked.mode is not None:
        allowed = base.mode or cluster_mode
        if _MODE_RANK[asked.mode] <= _MODE_RANK[allowed]:
            update["mode"] = asked.mode
        else:
            refused.append(f"mode '{asked.mode}' not granted: this job's policy is '{allowed}'")
    for name in _AT_MOST & fields:
        wanted, ceiling = getattr(asked, name), getattr(base, name)
        update[name] = min(wanted, ceiling)
        if wanted > ceiling:
            refused.append(f"{name} {wanted:g} not granted: at most {ceiling:g}")
    for name in _AT_LEAST & fields:
        wanted, floor = getattr(asked, name), getattr(base, name)
        update[name] = max(wanted, floor)
        if wanted < floor:
            refused.append(f"{name} {wanted:g} not granted: at least {floor:g}")
    if "allow_restart_from_scratch" in fields:
        update["allow_restart_from_scratch"] = (
            asked.allow_restart_from_scratch and base.allow_restart_from_scratch
        )
        if asked.allow_restart_from_scratch and not base.allow_restart_from_scratch:
            refused.append("allow_restart_from_scratch not granted: the operator turned it off")
    if "hang_after_s" in fields and asked.hang_after_s is not None:
        floor = base.hang_after_s
        update["hang_after_s"] = (
            asked.hang_after_s if floor is None else max(floor, asked.hang_after_s)
        )
        if floor is not None and asked.hang_after_s < floor:
            refused.append(f"hang_after_s {asked.hang_after_s:g} not granted: at least {floor:g}")
    if "lemon_action" in fields:
        if _LEMON_RANK[asked.lemon_action] <= _LEMON_RANK[base.lemon_action]:
            update["lemon_action"] = asked.lemon_action
        else:
            refused.append(
                f"lemon_action '{asked.lemon_action}' not granted: at most '{base.lemon_action}'"
            )
    if "checkpoint_dir" in fields:
        update["checkpoint_dir"] = asked.checkpoint_dir
    if "progress" in fields:
        update["progress"], progress_refused = _narrow_progress(
            base.progress, asked.progress, asked.progress.model_fields_set
        )
        refused.extend(progress_refused)
    if "notify" in fields:
        update["notify"] = list(dict.fromkeys([*base.notify, *asked.notify]))[:16]
    return base.model_copy(update=update), refused


# Progress settings a comment may only raise (a longer wait, a higher bar: later action).
_PROGRESS_AT_LEAST = (
    "hang_floor_s",
    "hang_k",
    "startup_s",
    "checkpoint_s",
    "eval_s",
    "hang_unconfirmed_s",
    "straggler_threshold",
    "straggler_duration_s",
)


def _narrow_progress(
    base: ProgressPolicy, asked: ProgressPolicy, fields: set[str]
) -> tuple[ProgressPolicy, list[str]]:
    """The operator's progress settings changed by the comment only towards acting later or
    not at all: thresholds and allowances up, hang detection off, stragglers only notified."""
    update: dict[str, Any] = {}
    refused: list[str] = []
    for name in _PROGRESS_AT_LEAST:
        if name not in fields:
            continue
        mine, theirs = getattr(base, name), getattr(asked, name)
        update[name] = max(mine, theirs)
        if theirs < mine:
            refused.append(f"progress.{name} {theirs:g} not granted: at least {mine:g}")
    if "hang_detection" in fields:
        update["hang_detection"] = base.hang_detection and asked.hang_detection
        if asked.hang_detection and not base.hang_detection:
            refused.append("progress.hang_detection not granted: the operator turned it off")
    if "straggler_action" in fields:
        if asked.straggler_action == "notify" or base.straggler_action == "restart":
            update["straggler_action"] = asked.straggler_action
        else:
            refused.append(
                "progress.straggler_action 'restart' not granted: this job's is 'notify'"
            )
    return base.model_copy(update=update), refused


def _fallback(job: JobInfo, config: ResurrectConfig) -> tuple[JobPolicy, PolicySource]:
    partition_policy = config.policy.partitions.get(job.partition)
    if partition_policy is not None:
        return partition_policy, "partition"
    return config.policy.default, "default"


def _from_comment(
    comment: str, base: JobPolicy, cluster_mode: RecoveryMode
) -> tuple[JobPolicy, list[str]]:
    document = parse_comment_json(comment)
    if not isinstance(document, dict) or "resurrect" not in document:
        raise PolicyError('expected a JSON object with a "resurrect" key')
    section = document["resurrect"]
    if isinstance(section, bool):
        return base.model_copy(update={"enabled": section}), []
    if not isinstance(section, dict):
        raise PolicyError('"resurrect" must be an object, true or false')
    return narrow(base, _requested(section), set(section), cluster_mode)


def resolve_job_policy(job: JobInfo, config: ResurrectConfig) -> PolicyResolution:
    """The policy for ``job``: its partition's (else the default), narrowed by its comment.

    Never raises: a comment that cannot be read gives a resolution that is not opted in."""
    fallback, fallback_source = _fallback(job, config)
    comment = job.comment.strip()
    if not comment or "resurrect" not in comment.lower():
        return PolicyResolution(policy=fallback, source=fallback_source)
    try:
        policy, refused = _from_comment(comment, fallback, config.mode)
    except (PolicyError, ValueError, RecursionError) as exc:
        problem = str(exc) if isinstance(exc, PolicyError) else exc.__class__.__name__
        return PolicyResolution(
            policy=fallback.model_copy(update={"enabled": False}),
            source="malformed_comment",
            problems=[f"job {job.job_id}: malformed resurrect comment, so not opted in: {problem}"],
        )
    return PolicyResolution(
        policy=policy,
        source="comment",
        problems=[f"job {job.job_id}: resurrect comment: {note}" for note in refused],
    )


def job_policy(job: JobInfo, config: ResurrectConfig) -> JobPolicy | None:
    """The job's policy if it is opted in, else None."""
    resolution = resolve_job_policy(job, config)
    return resolution.policy if resolution.opted_in else None
