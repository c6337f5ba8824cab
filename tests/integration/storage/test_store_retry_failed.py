"""RetryFailed, on every store (conftest.py)."""

from __future__ import annotations

from _storage_support import enqueue, make_failed

from san_jobs.job_service.domain.model import JobFilter, JobStatus, JobType
from san_jobs.job_service.domain.ports import (
    ClaimParams,
    JobStore,
    ListJobsParams,
    RetryFailedParams,
)
from tests.support.clock import FakeClock


async def test_retry_failed_moves_matching_jobs_and_keeps_history(
    store: JobStore, clock: FakeClock
) -> None:
    timeout = await make_failed(store, "r1", "Timeout: deadline exceeded")
    clock.advance(10)
    other = await make_failed(store, "r2", "AI gateway unavailable: refused")
    outcome = await store.commands.retry_failed(
        RetryFailedParams(
            job_filter=JobFilter(error_message_contains="Timeout"),
            limit=100,
            dry_run=False,
            extra_attempts=3,
        )
    )
    assert outcome.matched_count == 1
    assert outcome.retried_ids == (timeout.id,) and outcome.skipped == ()

    job = await store.queries.get(timeout.id)
    assert job.status is JobStatus.PENDING
    assert job.failed_at is None and job.next_attempt_at is None
    assert job.attempt_count == 1 and job.max_attempts == 4
    assert len(job.attempts) == 1 and job.attempts[0].error_message.startswith("Timeout")
    assert job.error_message == "Timeout: deadline exceeded"  # kept until the next outcome
    assert (await store.queries.get(other.id)).status is JobStatus.FAILED

    (claim,) = await store.worker.claim(ClaimParams(limit=10, lease_seconds=60))  # due at once
    assert claim.job.id == timeout.id and claim.job.attempt_count == 2


async def test_retry_failed_dry_run_limit_and_time_filters(
    store: JobStore, clock: FakeClock
) -> None:
    ids = []
    for i in range(5):
        ids.append((await make_failed(store, f"d{i}")).id)
        clock.advance(60)
    dry = await store.commands.retry_failed(
        RetryFailedParams(job_filter=JobFilter(), limit=3, dry_run=True, extra_attempts=1)
    )
    assert dry.matched_count == 3 and dry.retried_ids == tuple(ids[:3])  # oldest failure first
    failed, _ = await store.queries.list_jobs(
        ListJobsParams(
            job_filter=JobFilter(statuses=(JobStatus.FAILED,)), page_size=100, page_token=None
        )
    )
    assert len(failed) == 5  # a dry run moves nothing

    fourth_failed_at = (await store.queries.get(ids[3])).failed_at
    assert fourth_failed_at is not None
    late = await store.commands.retry_failed(
        RetryFailedParams(
            job_filter=JobFilter(failed_after=fourth_failed_at),
            limit=100,
            dry_run=False,
            extra_attempts=1,
        )
    )
    assert late.retried_ids == tuple(ids[3:])
    early = await store.commands.retry_failed(
        RetryFailedParams(
            job_filter=JobFilter(failed_before=fourth_failed_at),
            limit=1,
            dry_run=False,
            extra_attempts=1,
        )
    )
    assert early.retried_ids == (ids[0],)
    by_type = await store.commands.retry_failed(
        RetryFailedParams(
            job_filter=JobFilter(job_types=(JobType.TIL_GENERATION,)),
            limit=100,
            dry_run=False,
            extra_attempts=1,
        )
    )
    assert by_type.matched_count == 0 and by_type.retried_ids == ()


async def test_retry_failed_skips_a_target_with_an_active_job(store: JobStore) -> None:
    failed = await make_failed(store, "busy")
    active = await enqueue(store, "busy")
    free = await make_failed(store, "free")
    for dry_run in (True, False):
        outcome = await store.commands.retry_failed(
            RetryFailedParams(job_filter=JobFilter(), limit=100, dry_run=dry_run, extra_attempts=1)
        )
        assert outcome.matched_count == 2
        assert outcome.retried_ids == (free.id,)
        assert outcome.skipped == (
            (failed.id, f"an active job exists for this job type and target: {active.id}"),
        )
    assert (await store.queries.get(failed.id)).status is JobStatus.FAILED


async def test_two_failed_jobs_of_one_target_retry_only_one(
    store: JobStore, clock: FakeClock
) -> None:
    older = await make_failed(store, "twice")
    clock.advance(1)
    newer = await make_failed(store, "twice")
    outcome = await store.commands.retry_failed(
        RetryFailedParams(job_filter=JobFilter(), limit=100, dry_run=False, extra_attempts=1)
    )
    assert outcome.retried_ids == (older.id,)
    assert outcome.skipped == (
        (newer.id, f"an active job exists for this job type and target: {older.id}"),
    )


async def test_retry_failed_by_ids_and_targets(store: JobStore) -> None:
    a = await make_failed(store, "ta")
    b = await make_failed(store, "tb")
    c = await make_failed(store, "tc")
    by_id = await store.commands.retry_failed(
        RetryFailedParams(
            job_filter=JobFilter(job_ids=(a.id,)), limit=100, dry_run=False, extra_attempts=1
        )
    )
    assert by_id.retried_ids == (a.id,)
    by_target = await store.commands.retry_failed(
        RetryFailedParams(
            job_filter=JobFilter(target_ids=("tc",)), limit=100, dry_run=False, extra_attempts=1
        )
    )
    assert by_target.retried_ids == (c.id,)
    assert (await store.queries.get(b.id)).status is JobStatus.FAILED
    # Only FAILED jobs move: a retried (now PENDING) job is not matched again.
    again = await store.commands.retry_failed(
        RetryFailedParams(
            job_filter=JobFilter(job_ids=(a.id,)), limit=100, dry_run=False, extra_attempts=1
        )
    )
    assert again.matched_count == 0
