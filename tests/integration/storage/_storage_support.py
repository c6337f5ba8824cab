"""Helpers shared by the storage contract tests (every JobStore: see conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from san_jobs.job_service.domain.model import Failure, Job, JobType, NewJob, OnDuplicate
from san_jobs.job_service.domain.ports import (
    ClaimParams,
    EnqueueParams,
    FailParams,
    JobStore,
    ReleaseParams,
)

# open_store(instance_id): one more store on the test's database (conftest.py).
OpenStore = Callable[[str], JobStore]


def new_job(
    target_id: str = "scrap-1",
    job_type: JobType = JobType.CARD_ANALYSIS,
    *,
    request_id: str | None = None,
    max_attempts: int = 3,
    params: dict[str, Any] | None = None,
) -> NewJob:
    return NewJob(
        job_type=job_type,
        target_id=target_id,
        request_params=params if params is not None else {"text": f"text of {target_id}"},
        requested_by="tester",
        request_id=request_id,
        max_attempts=max_attempts,
    )


async def enqueue(store: JobStore, target_id: str = "scrap-1", **kwargs: Any) -> Job:
    job, _ = await store.commands.enqueue(
        EnqueueParams(job=new_job(target_id, **kwargs), on_duplicate=OnDuplicate.REJECT)
    )
    return job


def failure(
    message: str = "Timeout: the call took too long", code: str = "DEADLINE_EXCEEDED"
) -> Failure:
    return Failure(code=code, reason="", message=message, transient=False)


async def make_failed(
    store: JobStore,
    target_id: str,
    message: str = "Timeout: the call took too long",
    job_type: JobType = JobType.CARD_ANALYSIS,
) -> Job:
    """Enqueue, claim and fail for good one job."""
    await enqueue(store, target_id, job_type=job_type)
    claims = await store.worker.claim(ClaimParams(limit=1000, lease_seconds=60))
    claim = next(c for c in claims if c.job.target_id == target_id)
    for other in claims:
        if other is not claim:
            await store.worker.release(ReleaseParams(job_id=other.job.id, token=other.token))
    return await store.worker.fail(
        FailParams(job_id=claim.job.id, token=claim.token, failure=failure(message), retry_at=None)
    )
