"""Which jobs resurrect recovers, and with what policy.

A job opts in through its Slurm comment, a JSON object with a ``resurrect`` key::

    sbatch --comment '{"resurrect": {"max_restarts": 3, "checkpoint_dir": "/ckpt/run7"}}'

(``{"resurrect": true}`` opts in with the defaults; ``{"resurrect": false}`` opts out even
where the partition default opts in.) Otherwise the partition default from the config
applies, else the global default (opt-in only: disabled).

A comment that mentions resurrect but is malformed is reported (the problems are returned,
and the workflow records them) and the job gets the default policy with recovery enabled,
because its owner clearly meant to opt in. Comments are untrusted text: they are parsed as
JSON with a size cap and validated by :class:`JobPolicy`, never evaluated.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import ValidationError

from resurrect.config import ResurrectConfig
from resurrect.contracts import Contract, JobInfo, JobPolicy

MAX_COMMENT_BYTES = 16 * 1024

PolicySource = Literal["comment", "partition", "default", "malformed_comment"]


class PolicyResolution(Contract):
    policy: JobPolicy
    source: PolicySource
    problems: list[str] = []

    @property
    def opted_in(self) -> bool:
        return self.policy.enabled


def _fallback(job: JobInfo, config: ResurrectConfig) -> tuple[JobPolicy, PolicySource]:
    partition_policy = config.policy.partitions.get(job.partition)
    if partition_policy is not None:
        return partition_policy, "partition"
    return config.policy.default, "default"


def resolve_job_policy(job: JobInfo, config: ResurrectConfig) -> PolicyResolution:
    """The policy for ``job``: from its comment, else its partition, else the default."""
    comment = job.comment.strip()
    fallback, fallback_source = _fallback(job, config)
    if not comment or "resurrect" not in comment.lower():
        return PolicyResolution(policy=fallback, source=fallback_source)

    def malformed(problem: str) -> PolicyResolution:
        policy = fallback.model_copy(update={"enabled": True})
        return PolicyResolution(
            policy=policy,
            source="malformed_comment",
            problems=[f"job {job.job_id}: malformed resurrect comment: {problem}"],
        )

    if len(comment.encode("utf-8", "replace")) > MAX_COMMENT_BYTES:
        return malformed(f"longer than {MAX_COMMENT_BYTES} bytes")
    try:
        document = json.loads(comment)
    except (json.JSONDecodeError, RecursionError) as exc:
        return malformed(f"not JSON ({exc.__class__.__name__}: {str(exc)[:120]})")
    if not isinstance(document, dict) or "resurrect" not in document:
        return malformed('expected a JSON object with a "resurrect" key')
    section = document["resurrect"]
    if section is True:
        return PolicyResolution(
            policy=fallback.model_copy(update={"enabled": True}), source="comment"
        )
    if section is False:
        return PolicyResolution(
            policy=fallback.model_copy(update={"enabled": False}), source="comment"
        )
    if not isinstance(section, dict):
        return malformed('"resurrect" must be an object, true or false')
    merged = fallback.model_dump() | {"enabled": True} | section
    try:
        policy = JobPolicy.model_validate(merged)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        return malformed(f"field '{field}': {first['msg']}")
    return PolicyResolution(policy=policy, source="comment")


def job_policy(job: JobInfo, config: ResurrectConfig) -> JobPolicy | None:
    """The job's policy if it is opted in, else None."""
    resolution = resolve_job_policy(job, config)
    return resolution.policy if resolution.opted_in else None
