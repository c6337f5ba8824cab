"""Retention on every store (conftest.py): count_prunable, prune_batch, prune_lock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from _storage_support import OpenStore, enqueue, make_failed
from sqlalchemy import text

from san_jobs.job_service.domain.errors import JobNotFoundError
from san_jobs.job_service.domain.model import Job, JobFilter, JobStatus
from san_jobs.job_service.domain.ports import (
    CancelParams,
    ClaimParams,
    CompleteParams,
    CountPrunableParams,
    JobStore,
    PruneBatchParams,
    ReleaseParams,
    RetryFailedParams,
)
from san_jobs.job_service.storage.prune import count_past_statement, prune_batch_statement
from san_jobs.job_service.storage.repository import SqlJobStore
from tests.support.clock import FakeClock

COMPLETED, FAILED, CANCELLED = JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED


async def make_completed(store: JobStore, target_id: str) -> Job:
    await enqueue(store, target_id)
    claims = await store.worker.claim(ClaimParams(limit=1000, lease_seconds=60))
    (claim,) = [c for c in claims if c.job.target_id == target_id]
    for other in claims:
        if other is not claim:
            await store.worker.release(ReleaseParams(job_id=other.job.id, token=other.token))
    return await store.worker.complete(
        CompleteParams(job_id=claim.job.id, token=claim.token, result={"summary": "done"})
    )


async def make_cancelled(store: JobStore, target_id: str) -> Job:
    job = await enqueue(store, target_id)
    return await store.commands.cancel(CancelParams(job_id=job.id, reason="not needed"))


async def exists(store: JobStore, job_id: str) -> bool:
    try:
        await store.queries.get(job_id)
    except JobNotFoundError:
        return False
    return True


async def test_prune_deletes_only_terminal_jobs_that_ended_before_the_cutoff(
    store: JobStore, clock: FakeClock
) -> None:
    # Old: one job of each terminal status, and two active jobs just as old.
    old_done = await make_completed(store, "old-done")
    old_failed = await make_failed(store, "old-failed")
    old_cancelled = await make_cancelled(store, "old-cancelled")
    processing = await enqueue(store, "still-processing")
    (claim,) = await store.worker.claim(ClaimParams(limit=1000, lease_seconds=86_400))
    assert claim.job.id == processing.id
    pending = await enqueue(store, "still-pending")
    clock.advance(3600)
    cutoff = clock()
    clock.advance(1)
    # New: ended after the cutoff.
    new_done = await make_completed(store, "new-done")
    new_failed = await make_failed(store, "new-failed")

    cutoffs = {COMPLETED: cutoff, FAILED: cutoff, CANCELLED: cutoff}
    assert await store.retention.count_prunable(
        CountPrunableParams(cutoffs=cutoffs, limit=100)
    ) == {
        COMPLETED: 1,
        FAILED: 1,
        CANCELLED: 1,
    }
    # Active statuses are never pruned, whatever the caller asks.
    with pytest.raises(ValueError, match="only terminal"):
        await store.retention.prune_batch(
            PruneBatchParams(status=JobStatus.PENDING, cutoff=clock(), limit=100)
        )
    assert (
        await store.retention.prune_batch(
            PruneBatchParams(status=COMPLETED, cutoff=cutoff, limit=100)
        )
        == 1
    )
    assert (
        await store.retention.prune_batch(PruneBatchParams(status=FAILED, cutoff=cutoff, limit=100))
        == 1
    )
    assert (
        await store.retention.prune_batch(
            PruneBatchParams(status=CANCELLED, cutoff=cutoff, limit=100)
        )
        == 1
    )
    assert (
        await store.retention.prune_batch(
            PruneBatchParams(status=COMPLETED, cutoff=cutoff, limit=100)
        )
        == 0
    )

    for gone in (old_done, old_failed, old_cancelled):
        assert not await exists(store, gone.id)
    for kept in (pending, processing, new_done, new_failed):
        assert await exists(store, kept.id)
    assert (await store.queries.get(pending.id)).status is JobStatus.PENDING
    assert (await store.queries.get(processing.id)).status is JobStatus.PROCESSING
    assert await store.retention.count_prunable(
        CountPrunableParams(cutoffs=cutoffs, limit=100)
    ) == {
        COMPLETED: 0,
        FAILED: 0,
        CANCELLED: 0,
    }


async def test_prune_batches_take_the_oldest_first_and_counts_stop_at_the_limit(
    store: JobStore, clock: FakeClock
) -> None:
    done = []
    for i in range(5):
        done.append(await make_completed(store, f"done-{i}"))
        clock.advance(60)
    cutoff = clock()
    assert await store.retention.count_prunable(
        CountPrunableParams(cutoffs={COMPLETED: cutoff}, limit=3)
    ) == {COMPLETED: 3}
    assert await store.retention.count_prunable(
        CountPrunableParams(cutoffs={COMPLETED: cutoff}, limit=10)
    ) == {COMPLETED: 5}
    # Only the statuses asked about are counted.
    assert await store.retention.count_prunable(CountPrunableParams(cutoffs={}, limit=10)) == {}

    assert (
        await store.retention.prune_batch(
            PruneBatchParams(status=COMPLETED, cutoff=cutoff, limit=2)
        )
        == 2
    )
    assert [await exists(store, j.id) for j in done] == [False, False, True, True, True]
    # The cutoff is strict: a job that ended at it stays.
    at_cutoff = done[3].updated_at
    assert (
        await store.retention.prune_batch(
            PruneBatchParams(status=COMPLETED, cutoff=at_cutoff, limit=10)
        )
        == 1
    )
    assert [await exists(store, j.id) for j in done] == [False, False, False, True, True]
    assert (
        await store.retention.prune_batch(
            PruneBatchParams(status=COMPLETED, cutoff=cutoff, limit=2)
        )
        == 2
    )
    assert await store.retention.count_prunable(
        CountPrunableParams(cutoffs={COMPLETED: cutoff}, limit=10)
    ) == {COMPLETED: 0}


async def test_a_retried_failed_job_is_not_pruned_as_failed(
    store: JobStore, clock: FakeClock
) -> None:
    failed = await make_failed(store, "retried")
    clock.advance(60)
    outcome = await store.commands.retry_failed(
        RetryFailedParams(job_filter=JobFilter(), limit=10, dry_run=False, extra_attempts=1)
    )
    assert outcome.retried_ids == (failed.id,)
    clock.advance(60)
    assert (
        await store.retention.prune_batch(PruneBatchParams(status=FAILED, cutoff=clock(), limit=10))
        == 0
    )
    assert (await store.queries.get(failed.id)).status is JobStatus.PENDING


async def test_one_prune_lock_holder_per_database(
    open_store: OpenStore, store_database: str | None
) -> None:
    first, second = open_store("instance-a"), open_store("instance-b")
    async with first.retention.prune_lock() as held:
        assert held
        async with second.retention.prune_lock() as also_held:
            if store_database is not None and store_database.startswith("sqlite"):
                # SQLite serves one instance by design: no cluster lock to take.
                assert also_held
            else:
                assert not also_held
    # Released on exit: the other instance's turn.
    async with second.retention.prune_lock() as held:
        assert held
    async with first.retention.prune_lock() as held:
        assert held


@pytest.mark.postgres
async def test_the_prune_lock_is_dropped_with_a_run_that_fails(
    clean_postgres_url: str, clock: FakeClock
) -> None:
    """PostgreSQL's advisory lock (SQLite and memory have no other instance to wait)."""
    first = SqlJobStore(clean_postgres_url, instance_id="instance-a", clock=clock)
    second = SqlJobStore(clean_postgres_url, instance_id="instance-b", clock=clock)
    try:
        with pytest.raises(RuntimeError):
            async with first.retention.prune_lock() as held:
                assert held
                raise RuntimeError("a run that failed half way")
        async with second.retention.prune_lock() as held:
            assert held
    finally:
        await first.close()
        await second.close()


@pytest.mark.postgres
async def test_prune_uses_the_terminal_index_on_postgresql(
    clean_postgres_url: str, clock: FakeClock
) -> None:
    """Each batch and each count is a range scan of ix_async_jobs_terminal_end that
    stops at its LIMIT, not a scan of the table (the plan, not a time, is checked)."""
    sql_store = SqlJobStore(clean_postgres_url, instance_id="plans", clock=clock)
    try:
        await _check_prune_plans(sql_store)
    finally:
        await sql_store.close()


async def _check_prune_plans(sql_store: SqlJobStore) -> None:
    async with sql_store.engine.begin() as conn:
        # A few thousand finished jobs, most of them past the cutoff.
        await conn.execute(
            text(
                "INSERT INTO async_jobs (id, job_type, status, target_id, request_params,"
                " attempts, max_attempts, created_at, updated_at, completed_at)"
                " SELECT gen_random_uuid()::text, 'CARD_ANALYSIS', 'COMPLETED', 't' || i,"
                " '{}'::jsonb, '[]'::jsonb, 3, now() - i * interval '1 minute',"
                " now() - i * interval '1 minute', now() - i * interval '1 minute'"
                " FROM generate_series(1, 5000) AS i"
            )
        )
        await conn.execute(text("ANALYZE async_jobs"))
        # A twentieth of them past the cutoff (the usual case: a prune every minute
        # finds the jobs that aged past it since the last run).
        cutoff = datetime.now(UTC) - timedelta(minutes=4750)
        for statement in (
            prune_batch_statement(COMPLETED, cutoff, 1000, pg=True),
            count_past_statement(COMPLETED, cutoff, 100_001),
        ):
            compiled = statement.compile(
                dialect=conn.dialect, compile_kwargs={"literal_binds": True}
            )
            plan = "\n".join(row[0] for row in await conn.execute(text(f"EXPLAIN {compiled}")))
            assert "ix_async_jobs_terminal_end" in plan, plan
            assert "Seq Scan" not in plan, plan
