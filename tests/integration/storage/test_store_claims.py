"""Claims, leases, outcomes and their token checks, on every store (conftest.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from _storage_support import enqueue, failure

from san_jobs.job_service.domain.errors import (
    InvalidJobStateError,
    JobNotFoundError,
    LeaseLostError,
)
from san_jobs.job_service.domain.model import JobStatus
from san_jobs.job_service.domain.ports import (
    CancelParams,
    ClaimParams,
    CompleteParams,
    FailParams,
    JobStore,
    ReleaseParams,
    RenewLeasesParams,
)
from san_jobs.job_service.storage.repository import LEASE_EXPIRED_CODE
from tests.support.clock import FakeClock


async def test_claim_takes_a_batch_oldest_first(store: JobStore, clock: FakeClock) -> None:
    jobs = []
    for i in range(5):
        jobs.append(await enqueue(store, f"c{i}"))
        clock.advance(1)
    claims = await store.worker.claim(ClaimParams(limit=3, lease_seconds=60))
    assert [c.job.id for c in claims] == [j.id for j in jobs[:3]]
    for c in claims:
        job = c.job
        assert job.status is JobStatus.PROCESSING
        assert c.token and job.claim_token == c.token
        assert job.attempt_count == 1
        assert job.started_at == clock.now
        assert job.lease_expires_at == clock.now + timedelta(seconds=60)
        assert len(job.attempts) == 1
        attempt = job.attempts[0]
        assert attempt.attempt == 1 and attempt.start_time == clock.now
        assert attempt.end_time is None
    assert len({c.token for c in claims}) == 3
    rest = await store.worker.claim(ClaimParams(limit=10, lease_seconds=60))
    assert [c.job.id for c in rest] == [j.id for j in jobs[3:]]
    assert await store.worker.claim(ClaimParams(limit=10, lease_seconds=60)) == []
    assert await store.worker.claim(ClaimParams(limit=0, lease_seconds=60)) == []


async def test_complete_closes_the_attempt_and_clears_the_claim(
    store: JobStore, clock: FakeClock
) -> None:
    await enqueue(store, "done")
    (claim,) = await store.worker.claim(ClaimParams(limit=1, lease_seconds=60))
    clock.advance(2)
    result = {"summary": "요약", "tags": ["큐"], "embedding": [1.0, 0.0], "model": "local"}
    job = await store.worker.complete(
        CompleteParams(job_id=claim.job.id, token=claim.token, result=result)
    )
    assert job.status is JobStatus.COMPLETED
    assert job.result == result
    assert job.completed_at == clock.now
    assert job.claim_token is None and job.lease_expires_at is None
    assert job.attempts[0].end_time == clock.now and job.attempts[0].error_code == ""
    assert await store.queries.get(job.id) == job
    assert await store.worker.next_due_at() is None
    with pytest.raises(LeaseLostError):
        await store.worker.complete(
            CompleteParams(job_id=claim.job.id, token=claim.token, result=result)
        )


async def test_fail_with_retry_waits_until_due_then_fails_for_good(
    store: JobStore, clock: FakeClock
) -> None:
    await enqueue(store, "flaky")
    (claim,) = await store.worker.claim(ClaimParams(limit=1, lease_seconds=60))
    retry_at = clock.now + timedelta(seconds=30)
    job = await store.worker.fail(
        FailParams(
            job_id=claim.job.id,
            token=claim.token,
            failure=failure("Timeout: 30s"),
            retry_at=retry_at,
        )
    )
    assert job.status is JobStatus.PENDING
    assert job.next_attempt_at == retry_at
    assert job.error_code == "DEADLINE_EXCEEDED" and job.error_message == "Timeout: 30s"
    assert job.claim_token is None and job.lease_expires_at is None
    assert job.attempts[0].error_message == "Timeout: 30s" and job.attempts[0].end_time == clock.now
    assert await store.worker.next_due_at() == retry_at

    assert await store.worker.claim(ClaimParams(limit=5, lease_seconds=60)) == []  # not due yet
    clock.advance(30)
    (again,) = await store.worker.claim(ClaimParams(limit=5, lease_seconds=60))
    assert again.job.attempt_count == 2 and again.job.next_attempt_at is None
    assert [a.attempt for a in again.job.attempts] == [1, 2]

    final = await store.worker.fail(
        FailParams(
            job_id=again.job.id,
            token=again.token,
            failure=failure("JSON Parse Error", "INTERNAL"),
            retry_at=None,
        )
    )
    assert final.status is JobStatus.FAILED
    assert final.failed_at == clock.now and final.next_attempt_at is None
    assert final.error_code == "INTERNAL"
    assert [a.error_code for a in final.attempts] == ["DEADLINE_EXCEEDED", "INTERNAL"]
    assert await store.worker.next_due_at() is None


async def test_expired_lease_is_claimed_again_as_a_new_attempt(
    store: JobStore, clock: FakeClock
) -> None:
    await enqueue(store, "lost", max_attempts=3)
    (first,) = await store.worker.claim(ClaimParams(limit=1, lease_seconds=10))
    clock.advance(5)
    assert (
        await store.worker.claim(ClaimParams(limit=1, lease_seconds=10)) == []
    )  # lease still valid
    clock.advance(6)
    (second,) = await store.worker.claim(ClaimParams(limit=1, lease_seconds=10))
    job = second.job
    assert job.id == first.job.id and second.token != first.token
    assert job.attempt_count == 2
    assert job.error_code == LEASE_EXPIRED_CODE
    assert job.error_message == "Lease expired: the worker was lost"
    lost, current = job.attempts
    assert lost.end_time == clock.now and lost.error_code == LEASE_EXPIRED_CODE
    assert current.attempt == 2 and current.end_time is None

    # The old owner comes back: none of its writes land.
    with pytest.raises(LeaseLostError):
        await store.worker.complete(
            CompleteParams(job_id=job.id, token=first.token, result={"summary": "stale"})
        )
    with pytest.raises(LeaseLostError):
        await store.worker.fail(
            FailParams(job_id=job.id, token=first.token, failure=failure(), retry_at=None)
        )
    assert await store.worker.release(ReleaseParams(job_id=job.id, token=first.token)) is None
    assert (
        await store.worker.renew_leases(
            RenewLeasesParams(leases=[(job.id, first.token)], lease_seconds=60)
        )
        == set()
    )

    done = await store.worker.complete(
        CompleteParams(job_id=job.id, token=second.token, result={"summary": "fresh"})
    )
    assert done.result == {"summary": "fresh"}


async def test_exhausted_leases_fail_with_lease_expired(store: JobStore, clock: FakeClock) -> None:
    job = await enqueue(store, "doomed", max_attempts=1)
    await store.worker.claim(ClaimParams(limit=1, lease_seconds=10))
    clock.advance(11)
    assert (
        await store.worker.claim(ClaimParams(limit=5, lease_seconds=10)) == []
    )  # attempts used up: not claimed again
    assert await store.worker.next_due_at() is not None
    (failed,) = await store.worker.fail_exhausted_leases()
    assert failed.id == job.id and failed.status is JobStatus.FAILED
    assert failed.error_code == LEASE_EXPIRED_CODE and failed.failed_at == clock.now
    assert failed.claim_token is None
    assert failed.attempts[0].error_code == LEASE_EXPIRED_CODE
    assert failed.attempts[0].end_time == clock.now
    assert await store.worker.fail_exhausted_leases() == []
    assert await store.worker.next_due_at() is None


async def test_renew_lease_pushes_expiry(store: JobStore, clock: FakeClock) -> None:
    await enqueue(store, "long")
    (claim,) = await store.worker.claim(ClaimParams(limit=1, lease_seconds=10))
    clock.advance(8)
    assert await store.worker.renew_leases(
        RenewLeasesParams(leases=[(claim.job.id, claim.token)], lease_seconds=10)
    ) == {claim.job.id}
    clock.advance(8)
    assert (
        await store.worker.claim(ClaimParams(limit=1, lease_seconds=10)) == []
    )  # renewed: not expired
    job = await store.queries.get(claim.job.id)
    assert job.lease_expires_at == clock.now + timedelta(seconds=2)
    assert (
        await store.worker.renew_leases(
            RenewLeasesParams(leases=[(claim.job.id, "wrong-token")], lease_seconds=10)
        )
        == set()
    )


async def test_renew_leases_renews_every_owned_lease_in_one_call(
    store: JobStore, clock: FakeClock
) -> None:
    for i in range(4):
        await enqueue(store, f"many-{i}")
    a, b, c, d = await store.worker.claim(ClaimParams(limit=4, lease_seconds=10))
    await store.worker.complete(
        CompleteParams(job_id=c.job.id, token=c.token, result={"summary": "done"})
    )
    await store.commands.cancel(CancelParams(job_id=d.job.id, reason="user left"))
    clock.advance(8)
    owned = await store.worker.renew_leases(
        RenewLeasesParams(
            leases=[
                (a.job.id, a.token),
                (b.job.id, "stale-token"),
                (c.job.id, c.token),
                (d.job.id, d.token),
            ],
            lease_seconds=10,
        )
    )
    assert owned == {a.job.id}
    assert (await store.queries.get(a.job.id)).lease_expires_at == clock.now + timedelta(seconds=10)
    assert (await store.queries.get(b.job.id)).lease_expires_at == clock.now + timedelta(seconds=2)
    assert await store.worker.renew_leases(RenewLeasesParams(leases=[], lease_seconds=10)) == set()


async def test_release_gives_the_job_back_without_charging(
    store: JobStore, clock: FakeClock
) -> None:
    await enqueue(store, "shutdown")
    (claim,) = await store.worker.claim(ClaimParams(limit=1, lease_seconds=60))
    released = await store.worker.release(ReleaseParams(job_id=claim.job.id, token=claim.token))
    assert released is not None
    assert released.status is JobStatus.PENDING
    assert released.attempt_count == 0 and released.attempts == ()
    assert released.claim_token is None and released.lease_expires_at is None
    assert released.started_at is None
    (again,) = await store.worker.claim(ClaimParams(limit=1, lease_seconds=60))
    assert again.job.attempt_count == 1 and len(again.job.attempts) == 1
    assert (
        await store.worker.release(ReleaseParams(job_id=claim.job.id, token=claim.token)) is None
    )  # old token


async def test_cancel_in_each_state(store: JobStore, clock: FakeClock) -> None:
    pending = await enqueue(store, "x-pending")
    cancelled = await store.commands.cancel(CancelParams(job_id=pending.id, reason="user asked"))
    assert cancelled.status is JobStatus.CANCELLED
    assert cancelled.cancel_reason == "user asked" and cancelled.cancelled_at == clock.now

    await enqueue(store, "x-processing")
    (claim,) = await store.worker.claim(ClaimParams(limit=1, lease_seconds=60))
    stopped = await store.commands.cancel(CancelParams(job_id=claim.job.id, reason="stop it"))
    assert stopped.status is JobStatus.CANCELLED
    assert stopped.claim_token is None and stopped.lease_expires_at is None
    assert stopped.attempts[-1].end_time == clock.now
    assert stopped.attempts[-1].error_code == "CANCELLED"
    with pytest.raises(LeaseLostError):  # the worker's late write is refused
        await store.worker.complete(
            CompleteParams(job_id=claim.job.id, token=claim.token, result={"summary": "late"})
        )
    assert (await store.queries.get(claim.job.id)).status is JobStatus.CANCELLED

    for terminal_id in (pending.id, claim.job.id):
        with pytest.raises(InvalidJobStateError) as err:
            await store.commands.cancel(CancelParams(job_id=terminal_id, reason="again"))
        assert err.value.status == "CANCELLED"
    await enqueue(store, "x-done")
    (done_claim,) = await store.worker.claim(ClaimParams(limit=1, lease_seconds=60))
    await store.worker.complete(
        CompleteParams(job_id=done_claim.job.id, token=done_claim.token, result={})
    )
    with pytest.raises(InvalidJobStateError):
        await store.commands.cancel(CancelParams(job_id=done_claim.job.id, reason="too late"))
    with pytest.raises(JobNotFoundError):
        await store.commands.cancel(
            CancelParams(job_id="00000000-0000-0000-0000-000000000000", reason="who")
        )
