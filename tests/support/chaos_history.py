"""Soak histories built field by field, for the tests of the soak's invariants and figures."""

from __future__ import annotations

from benchmarks.chaos.history import FaultRecord, History, JobRun, Recovery


def history(**fields: object) -> History:
    base = History(seed=1, started_at=0.0, ended_at=1000.0, drain_limit=2, warmup_s=60.0)
    for key, value in fields.items():
        setattr(base, key, value)
    return base


def job(job_id: str = "1", **fields: object) -> JobRun:
    run = JobRun(job_id=job_id, shape="torchrun-2n", opted_in=True, max_restarts=3,
                 submitted_at=0.0, final_state="COMPLETED", ended_at=500.0,
                 final_sha="abc", reference_sha="abc")  # fmt: skip
    for key, value in fields.items():
        setattr(run, key, value)
    return run


def fault(kind: str, at: float, job_id: str | None = "1", node: str | None = None) -> FaultRecord:
    return FaultRecord(index=0, kind=kind, at=at, job_id=job_id, node=node,
                       affected_jobs=[job_id] if job_id else [])  # fmt: skip


def recovery(job_id: str = "1", at: float = 100.0, **fields: object) -> Recovery:
    rec = Recovery(workflow_id=f"recovery/c/{job_id}/0", job_id=job_id, started_at=at,
                   closed_at=at + 30, status="completed", outcome="recovered", requeued=True,
                   running_again_at=at + 20)  # fmt: skip
    for key, value in fields.items():
        setattr(rec, key, value)
    return rec
