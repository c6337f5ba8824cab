"""Enqueue, duplicates, idempotency and reads, on every store (conftest.py)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, timedelta

import pytest
from _storage_support import enqueue, failure, make_failed, new_job
from sqlalchemy import text

from san_jobs.job_service.domain.errors import (
    DuplicateJobError,
    InvalidRequestError,
    JobNotFoundError,
)
from san_jobs.job_service.domain.model import JobFilter, JobStatus, JobType, OnDuplicate
from san_jobs.job_service.domain.ports import (
    CancelParams,
    ClaimParams,
    EnqueueParams,
    FailParams,
    JobStore,
    ListJobsParams,
)
from san_jobs.job_service.storage.repository import SqlJobStore
from tests.support.clock import FakeClock


async def test_enqueue_then_get_round_trips_korean_text_and_utc_times(store: JobStore) -> None:
    params = {
        "text": "오늘은 비동기 작업 큐를 배웠다. 재시도와 리스가 핵심이다.",
        "title": "TIL 📝",
    }
    job, deduplicated = await store.commands.enqueue(
        EnqueueParams(
            job=new_job("스크랩-42", params=params, request_id="req-1"),
            on_duplicate=OnDuplicate.REJECT,
        )
    )
    assert not deduplicated
    assert job.status is JobStatus.PENDING
    assert job.attempt_count == 0 and job.attempts == ()

    got = await store.queries.get(job.id)
    assert got == job
    assert got.request_params == params
    assert got.target_id == "스크랩-42"
    assert got.created_at.tzinfo is not None and got.created_at.utcoffset() == UTC.utcoffset(None)
    assert got.next_attempt_at is None and got.claim_token is None


async def test_get_unknown_job_raises_not_found(store: JobStore) -> None:
    with pytest.raises(JobNotFoundError):
        await store.queries.get("00000000-0000-0000-0000-000000000000")


async def test_get_many_leaves_unknown_ids_out(store: JobStore) -> None:
    a = await enqueue(store, "a")
    b = await enqueue(store, "b")
    got = await store.queries.get_many([b.id, "nope", a.id, b.id])
    assert [j.id for j in got] == [b.id, a.id]


async def test_duplicate_active_job_is_rejected_or_returned(store: JobStore) -> None:
    first = await enqueue(store, "t1")
    with pytest.raises(DuplicateJobError) as err:
        await enqueue(store, "t1")
    assert err.value.existing_job_id == first.id

    same, deduplicated = await store.commands.enqueue(
        EnqueueParams(job=new_job("t1"), on_duplicate=OnDuplicate.RETURN_EXISTING)
    )
    assert deduplicated and same.id == first.id

    # Another job type, or the same target once the job is terminal: allowed.
    await enqueue(store, "t1", job_type=JobType.TIL_GENERATION)
    await store.commands.cancel(CancelParams(job_id=first.id, reason="test"))
    again = await enqueue(store, "t1")
    assert again.id != first.id


async def test_concurrent_enqueues_of_one_target_make_exactly_one_job(store: JobStore) -> None:
    results = await asyncio.gather(
        *(enqueue(store, "same-target") for _ in range(8)), return_exceptions=True
    )
    jobs = [r for r in results if not isinstance(r, BaseException)]
    errors = [r for r in results if isinstance(r, BaseException)]
    assert len(jobs) == 1
    assert len(errors) == 7 and all(isinstance(e, DuplicateJobError) for e in errors)
    assert {e.existing_job_id for e in errors if isinstance(e, DuplicateJobError)} == {jobs[0].id}
    listed, _ = await store.queries.list_jobs(
        ListJobsParams(job_filter=JobFilter(), page_size=100, page_token=None)
    )
    assert len(listed) == 1


async def test_request_id_returns_the_original_job(store: JobStore) -> None:
    job, dedup = await store.commands.enqueue(
        EnqueueParams(job=new_job("r1", request_id="key-1"), on_duplicate=OnDuplicate.REJECT)
    )
    assert not dedup
    # Same key, even after the job is terminal and even for another target.
    await store.commands.cancel(CancelParams(job_id=job.id, reason="done"))
    again, dedup = await store.commands.enqueue(
        EnqueueParams(job=new_job("other", request_id="key-1"), on_duplicate=OnDuplicate.REJECT)
    )
    assert dedup and again.id == job.id


async def test_concurrent_enqueues_with_one_request_id_return_one_job(store: JobStore) -> None:
    results = await asyncio.gather(
        *(
            store.commands.enqueue(
                EnqueueParams(
                    job=new_job(f"target-{i}", request_id="same-key"),
                    on_duplicate=OnDuplicate.REJECT,
                )
            )
            for i in range(6)
        )
    )
    assert len({job.id for job, _ in results}) == 1
    assert sorted(dedup for _, dedup in results) == [False] + [True] * 5


async def test_list_jobs_pages_newest_first_without_gaps(store: JobStore, clock: FakeClock) -> None:
    ids = []
    for i in range(25):
        if i % 3 == 0:
            clock.advance(1)  # several jobs share a created_at: the id breaks ties
        ids.append((await enqueue(store, f"p{i}")).id)
    seen = []
    token = None
    pages = 0
    while True:
        jobs, token = await store.queries.list_jobs(
            ListJobsParams(job_filter=JobFilter(), page_size=10, page_token=token)
        )
        pages += 1
        seen.extend(jobs)
        if token is None:
            break
    assert pages == 3
    assert len(seen) == 25 and len({j.id for j in seen}) == 25
    keys = [(j.created_at, j.id) for j in seen]
    assert keys == sorted(keys, reverse=True)


async def test_list_jobs_rejects_a_malformed_page_token(store: JobStore) -> None:
    with pytest.raises(InvalidRequestError) as err:
        await store.queries.list_jobs(
            ListJobsParams(job_filter=JobFilter(), page_size=10, page_token="not-a-token!")
        )
    assert err.value.violations[0].field == "page_token"


async def test_list_jobs_filters(store: JobStore, clock: FakeClock) -> None:
    t0 = clock.now
    card = await enqueue(store, "f1")
    clock.advance(10)
    til = await enqueue(store, "f2", job_type=JobType.TIL_GENERATION)
    failed = await make_failed(store, "f3", "Rate Limit Exceeded (Too many requests)")

    async def ids(f: JobFilter) -> set[str]:
        jobs, _ = await store.queries.list_jobs(
            ListJobsParams(job_filter=f, page_size=100, page_token=None)
        )
        return {j.id for j in jobs}

    assert await ids(JobFilter(job_types=(JobType.TIL_GENERATION,))) == {til.id}
    assert await ids(JobFilter(statuses=(JobStatus.FAILED,))) == {failed.id}
    assert await ids(JobFilter(target_ids=("f1", "f3"))) == {card.id, failed.id}
    assert await ids(JobFilter(error_message_contains="Rate Limit")) == {failed.id}
    assert await ids(JobFilter(error_message_contains="rate limit")) == set()  # exact case
    assert await ids(JobFilter(created_before=t0 + (clock.now - t0) / 2)) == {card.id}
    assert await ids(JobFilter(created_after=clock.now)) == {til.id, failed.id}
    assert await ids(JobFilter(failed_after=clock.now)) == {failed.id}


async def test_error_message_contains_escapes_like_wildcards(store: JobStore) -> None:
    percent = await make_failed(store, "w1", "disk 100% full")
    underscore = await make_failed(store, "w2", "bad field_name")
    await make_failed(store, "w3", "disk 1000 full and fieldXname")

    async def ids(needle: str) -> set[str]:
        jobs, _ = await store.queries.list_jobs(
            ListJobsParams(
                job_filter=JobFilter(error_message_contains=needle), page_size=100, page_token=None
            )
        )
        return {j.id for j in jobs}

    assert await ids("100%") == {percent.id}
    assert await ids("field_name") == {underscore.id}
    assert await ids("%") == {percent.id}


async def test_operators_sql_finds_failed_targets(sql_store: SqlJobStore) -> None:
    await make_failed(sql_store, "scrap-timeout", "Timeout: deadline of 30s exceeded")
    await make_failed(sql_store, "scrap-other", "AI gateway unavailable: connection refused")
    await enqueue(sql_store, "scrap-pending")
    async with sql_store.engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT target_id FROM async_jobs "
                "WHERE status = 'FAILED' AND error_message LIKE '%Timeout%';"
            )
        )
        assert [r.target_id for r in rows] == ["scrap-timeout"]


async def test_stats_and_next_due_at(store: JobStore, clock: FakeClock) -> None:
    assert await store.worker.next_due_at() is None
    empty = await store.queries.stats()
    assert empty.counts == () and empty.oldest_pending_created_at is None

    first = await enqueue(store, "s1")
    clock.advance(5)
    await enqueue(store, "s2")
    await make_failed(store, "s3")
    stats = await store.queries.stats()
    counts = {(c.job_type, c.status): c.count for c in stats.counts}
    # make_failed claimed and released s1, s2 on its way.
    assert counts == {
        (JobType.CARD_ANALYSIS, JobStatus.PENDING): 2,
        (JobType.CARD_ANALYSIS, JobStatus.FAILED): 1,
    }
    assert stats.oldest_pending_created_at == first.created_at
    assert await store.worker.next_due_at() == clock.now  # released jobs are due at once


async def test_stats_give_the_oldest_due_job_of_each_type(
    store: JobStore, clock: FakeClock
) -> None:
    """For the metrics' "age of the oldest due job" (issue 14): PENDING jobs due by
    now, per type; a retry waiting for its time is not due, nor is a running job."""
    first = await enqueue(store, "c1")
    clock.advance(5)
    await enqueue(store, "c2")
    til = await enqueue(store, "t1", job_type=JobType.TIL_GENERATION)
    clock.advance(5)
    await enqueue(store, "r1", job_type=JobType.RECALL_GENERATION)
    (claim,) = await store.worker.claim(
        ClaimParams(limit=1, lease_seconds=30.0, only_type=JobType.RECALL_GENERATION)
    )
    stats = await store.queries.stats()
    assert stats.oldest_due_by_type == {
        JobType.CARD_ANALYSIS: first.created_at,
        JobType.TIL_GENERATION: til.created_at,
    }
    # A failed attempt retried in a minute: not due yet, so not late.
    retry_at = clock.now + timedelta(seconds=60)
    await store.worker.fail(
        FailParams(job_id=claim.job.id, token=claim.token, failure=failure(), retry_at=retry_at)
    )
    assert JobType.RECALL_GENERATION not in (await store.queries.stats()).oldest_due_by_type
    clock.advance(61)
    assert (await store.queries.stats()).oldest_due_by_type[JobType.RECALL_GENERATION] == retry_at


async def test_job_ids_are_time_ordered_uuid7(store: JobStore, clock: FakeClock) -> None:
    """New ids land on the id index's right edge (san_jobs/job_service/domain/job_ids.py)."""
    first = await enqueue(store, "u1")
    clock.advance(0.01)
    second = await enqueue(store, "u2")
    assert uuid.UUID(first.id).version == 7 and uuid.UUID(second.id).version == 7
    assert first.id < second.id
