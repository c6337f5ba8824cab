"""The change feed's port on every store (storage/changes.py on SQLite and PostgreSQL,
memory_changes.py): what is recorded (the trigger's rule, migration 0013; the memory
store's write, domain/changes.is_change), reads by filter, and retention as a
prefix; on PostgreSQL, positions without gaps even when transactions commit out of
order."""

from __future__ import annotations

from datetime import timedelta

import asyncpg
import pytest
from _storage_support import enqueue, make_failed

from san_jobs.job_service.domain.changes import ChangeFilter, JobChange
from san_jobs.job_service.domain.model import JobFilter, JobStatus, JobType
from san_jobs.job_service.domain.ports import (
    CancelParams,
    ClaimParams,
    CompleteParams,
    JobStore,
    PruneChangesParams,
    ReadChangesParams,
    RetryFailedParams,
)
from san_jobs.job_service.storage.repository import SqlJobStore
from tests.support.clock import FakeClock
from tests.support.databases import asyncpg_dsn

EVERYTHING = ChangeFilter()


async def read_all(
    store: JobStore, after: int = 0, change_filter: ChangeFilter = EVERYTHING
) -> list[JobChange]:
    state = await store.changes.sequence_changes(1000)
    changes, _ = await store.changes.read_changes(
        ReadChangesParams(after, state.last_pos, change_filter, 1000)
    )
    return changes


async def test_each_end_and_retry_is_one_change_with_the_job_as_it_was(
    store: JobStore, clock: FakeClock
) -> None:
    done = await enqueue(store, "done")
    claim = (await store.worker.claim(ClaimParams(limit=1, lease_seconds=60)))[0]
    await store.worker.complete(
        CompleteParams(job_id=claim.job.id, token=claim.token, result={"summary": "S", "tags": []})
    )
    failed = await make_failed(store, "failed")
    cancelled = await enqueue(store, "cancelled")
    await store.commands.cancel(CancelParams(job_id=cancelled.id, reason="no longer needed"))
    clock.advance(1)
    await store.commands.retry_failed(
        RetryFailedParams(
            job_filter=JobFilter(statuses=(JobStatus.FAILED,)),
            limit=10,
            dry_run=False,
            extra_attempts=1,
        )
    )
    # A claim (PENDING -> PROCESSING) and an enqueue are no changes.
    await enqueue(store, "still-pending")

    changes = await read_all(store)
    assert [(c.pos, c.job.id, c.job.status) for c in changes] == [
        (1, done.id, JobStatus.COMPLETED),
        (2, failed.id, JobStatus.FAILED),
        (3, cancelled.id, JobStatus.CANCELLED),
        (4, failed.id, JobStatus.PENDING),
    ]
    completed = changes[0].job
    assert completed.result == {"summary": "S", "tags": []}
    assert completed.request_params == {}  # the feed keeps no input
    assert completed.requested_by == "tester" and completed.target_id == "done"
    assert completed.completed_at is not None and len(completed.attempts) == 1
    assert changes[1].job.error_message == "Timeout: the call took too long"
    assert changes[2].job.cancel_reason == "no longer needed"
    # Retried: the snapshot is the PENDING job, with its failed attempt kept.
    assert changes[3].job.attempt_count == 1 and changes[3].job.error_message

    assert [c.pos for c in await read_all(store, after=2)] == [3, 4]
    only_failed = ChangeFilter(statuses=(JobStatus.FAILED,))
    assert [c.pos for c in await read_all(store, change_filter=only_failed)] == [2]
    others = ChangeFilter(requested_by="someone-else")
    assert await read_all(store, change_filter=others) == []
    embeddings = ChangeFilter(job_types=(JobType.EMBEDDING,))
    assert await read_all(store, change_filter=embeddings) == []


async def test_retention_deletes_a_prefix_and_says_how_far(
    store: JobStore, clock: FakeClock
) -> None:
    first = await enqueue(store, "old-1")
    second = await enqueue(store, "old-2")
    for job in (first, second):
        await store.commands.cancel(CancelParams(job_id=job.id, reason=""))
    clock.advance(3600)
    young = await enqueue(store, "young")
    await store.commands.cancel(CancelParams(job_id=young.id, reason=""))
    await store.changes.sequence_changes(1000)

    cutoff = clock() - timedelta(seconds=60)
    assert await store.changes.prune_changes(PruneChangesParams(cutoff, limit=1)) == 1
    assert await store.changes.prune_changes(PruneChangesParams(cutoff, limit=10)) == 1
    assert await store.changes.prune_changes(PruneChangesParams(cutoff, limit=10)) == 0
    changes, state = await store.changes.read_changes(ReadChangesParams(0, 10, EVERYTHING, 10))
    assert [c.job.id for c in changes] == [young.id]
    assert (state.pruned_through, state.last_pos) == (2, 3)


@pytest.mark.postgres
async def test_a_change_that_commits_late_gets_a_later_position_and_is_not_skipped(
    clean_postgres_url: str, clock: FakeClock
) -> None:
    """Two transactions write changes in one order (A's row first, so A's id is
    smaller) and commit in the other. A reader that has read B must still get A
    afterwards: positions follow visibility, not the order the rows were written."""
    store = SqlJobStore(clean_postgres_url, instance_id="test-a", clock=clock)
    try:
        first = await enqueue(store, "written-first")
        second = await enqueue(store, "committed-first")
        slow = await asyncpg.connect(asyncpg_dsn(clean_postgres_url))
        try:
            async with slow.transaction():
                await slow.execute(
                    "UPDATE async_jobs SET status = 'CANCELLED', due_at = NULL,"
                    " cancelled_at = updated_at WHERE id = $1",
                    first.id,
                )
                # A's change row exists, uncommitted, with the smaller id.
                await store.commands.cancel(CancelParams(job_id=second.id, reason=""))
                seen = await read_all(store)
                assert [(c.pos, c.job.id) for c in seen] == [(1, second.id)]
            # A commits now: it comes after what the reader has, not before it.
            later = await read_all(store, after=seen[-1].pos)
            assert [(c.pos, c.job.id) for c in later] == [(2, first.id)]
        finally:
            await slow.close()
        ids = await asyncpg_rows(clean_postgres_url, "SELECT id, pos FROM job_changes ORDER BY id")
        assert [pos for _, pos in ids] == [2, 1]  # written first, positioned second
    finally:
        await store.close()


async def asyncpg_rows(url: str, query: str) -> list[tuple[int, int]]:
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        return [tuple(row) for row in await conn.fetch(query)]  # type: ignore[misc]
    finally:
        await conn.close()


@pytest.mark.postgres
async def test_the_snapshots_large_values_are_compressed_with_lz4_where_the_server_has_it(
    clean_postgres_url: str,
) -> None:
    """The trigger copies each change's result and attempts (an embedding is ~5 KiB):
    pglz made that copy cost +13 % CPU per job in bench_change_feed, LZ4 ~0 %."""
    conn = await asyncpg.connect(asyncpg_dsn(clean_postgres_url))
    try:
        has_lz4 = await conn.fetchval(
            "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
        )
        methods = dict(
            await conn.fetch(
                "SELECT attname, attcompression::text FROM pg_attribute"
                " WHERE attrelid = 'job_changes'::regclass AND attname IN ('result', 'attempts')"
            )
        )
    finally:
        await conn.close()
    assert methods == (
        {"result": "l", "attempts": "l"} if has_lz4 else {"result": "", "attempts": ""}
    )


async def test_a_change_is_the_own_change_of_its_jobs_caller_only(store: JobStore) -> None:
    job = await enqueue(store, "mine")
    await store.commands.cancel(CancelParams(job_id=job.id, reason=""))
    (change,) = await read_all(store)
    assert await store.changes.is_own_change(change.pos, job.requested_by)
    assert not await store.changes.is_own_change(change.pos, "someone-else")
    assert not await store.changes.is_own_change(change.pos + 1, job.requested_by)
