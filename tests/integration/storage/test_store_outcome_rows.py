"""complete and fail return the whole job, the same as a read, whether the caller
gives the job as claimed (the worker: the columns an outcome cannot change then come
from it, storage/outcome_rows.py) or not (read by id), on every store (conftest.py)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from _storage_support import failure

from san_jobs.job_service.domain.errors import LeaseLostError
from san_jobs.job_service.domain.model import (
    AttemptUsage,
    Claim,
    Failure,
    JobStatus,
    JobType,
    NewJob,
    OnDuplicate,
)
from san_jobs.job_service.domain.ports import (
    CancelParams,
    ClaimParams,
    CompleteParams,
    EnqueueParams,
    FailParams,
    JobStore,
)
from tests.support.clock import FakeClock

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def claimed(store: JobStore, target_id: str, max_attempts: int = 3) -> Claim:
    """A job with every column ENQUEUE writes set (a long input, a request id, a
    traceparent), claimed."""
    new = NewJob(
        job_type=JobType.CARD_ANALYSIS,
        target_id=target_id,
        request_params={"text": "긴 글 " * 5_000, "title": target_id},
        requested_by="svc:reindexer",
        request_id=f"req-{target_id}",
        max_attempts=max_attempts,
        traceparent=TRACEPARENT,
    )
    await store.commands.enqueue(EnqueueParams(job=new, on_duplicate=OnDuplicate.REJECT))
    claims = await store.worker.claim(ClaimParams(limit=10, lease_seconds=60))
    (claim,) = [c for c in claims if c.job.target_id == target_id]
    return claim


@pytest.mark.parametrize("give_claimed", [True, False])
async def test_complete_returns_the_job_as_stored(
    store: JobStore, clock: FakeClock, give_claimed: bool
) -> None:
    claim = await claimed(store, "done")
    clock.advance(2)
    usage = AttemptUsage(model="local", input_tokens=3, output_tokens=4, duration_seconds=0.5)
    job = await store.worker.complete(
        CompleteParams(
            job_id=claim.job.id,
            token=claim.token,
            result={"summary": "요약"},
            usage=usage,
            claimed=claim.job if give_claimed else None,
        )
    )
    assert job == await store.queries.get(claim.job.id)
    assert job.status is JobStatus.COMPLETED and job.result == {"summary": "요약"}
    assert job.request_params == claim.job.request_params
    assert (job.request_id, job.traceparent) == ("req-done", TRACEPARENT)
    assert job.requested_by == "svc:reindexer" and job.created_at == claim.job.created_at
    assert job.attempts[0].end_time == clock.now and job.claim_token is None
    with pytest.raises(LeaseLostError):
        await store.worker.complete(
            CompleteParams(job_id=claim.job.id, token=claim.token, result={}, claimed=claim.job)
        )


@pytest.mark.parametrize("give_claimed", [True, False])
@pytest.mark.parametrize("retry", [True, False])
async def test_fail_returns_the_job_as_stored(
    store: JobStore, clock: FakeClock, give_claimed: bool, retry: bool
) -> None:
    claim = await claimed(store, "failing")
    clock.advance(1)
    retry_at = clock.now + timedelta(seconds=30) if retry else None
    job = await store.worker.fail(
        FailParams(
            job_id=claim.job.id,
            token=claim.token,
            failure=failure(),
            retry_at=retry_at,
            claimed=claim.job if give_claimed else None,
        )
    )
    assert job == await store.queries.get(claim.job.id)
    assert job.status is (JobStatus.PENDING if retry else JobStatus.FAILED)
    assert job.request_params == claim.job.request_params
    assert (job.request_id, job.traceparent) == ("req-failing", TRACEPARENT)
    assert job.error_code == "DEADLINE_EXCEEDED" and job.attempts[0].end_time == clock.now
    with pytest.raises(LeaseLostError):
        await store.worker.fail(
            FailParams(
                job_id=claim.job.id,
                token=claim.token,
                failure=failure(),
                retry_at=None,
                claimed=claim.job,
            )
        )


async def test_a_batch_mixes_claimed_unclaimed_and_lost(store: JobStore) -> None:
    """Concurrent outcomes share one statement: each caller still gets its own job,
    whole, or LeaseLostError."""
    claims = [await claimed(store, f"t{i}") for i in range(4)]
    lost = claims[3]
    await store.commands.cancel(CancelParams(job_id=lost.job.id, reason="stop"))
    outcomes = await asyncio.gather(
        store.worker.complete(
            CompleteParams(
                job_id=claims[0].job.id,
                token=claims[0].token,
                result={"n": 0},
                claimed=claims[0].job,
            )
        ),
        store.worker.complete(
            CompleteParams(job_id=claims[1].job.id, token=claims[1].token, result={"n": 1})
        ),
        store.worker.fail(
            FailParams(
                job_id=claims[2].job.id,
                token=claims[2].token,
                failure=failure(),
                retry_at=None,
                claimed=claims[2].job,
            )
        ),
        store.worker.complete(
            CompleteParams(job_id=lost.job.id, token=lost.token, result={"n": 3}, claimed=lost.job)
        ),
        return_exceptions=True,
    )
    assert isinstance(outcomes[3], LeaseLostError)
    for claim, outcome in zip(claims[:3], outcomes[:3], strict=True):
        assert outcome == await store.queries.get(claim.job.id)


async def test_a_claimed_job_of_another_id_is_refused(store: JobStore) -> None:
    one, other = await claimed(store, "one"), await claimed(store, "other")
    with pytest.raises(ValueError, match="as claimed"):
        await store.worker.complete(
            CompleteParams(job_id=one.job.id, token=one.token, result={}, claimed=other.job)
        )
    with pytest.raises(ValueError, match="as claimed"):
        fail = Failure(code="INTERNAL", reason="", message="m", transient=False)
        await store.worker.fail(
            FailParams(
                job_id=one.job.id, token=one.token, failure=fail, retry_at=None, claimed=other.job
            )
        )
