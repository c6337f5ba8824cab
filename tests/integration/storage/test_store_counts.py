"""Job counts by (type, status) stay exact through every way a job changes or goes.

The SQL stores read counts kept by triggers (storage/counts.py, migration 0009), not
a COUNT(*) of the table; these tests hold them to the rows themselves: after every
transition, RetryFailed, cancel, deletes and TRUNCATE, with concurrent writers, and
across folds of the deltas into the totals.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta

import pytest
from _storage_support import OpenStore, enqueue, failure, make_failed
from sqlalchemy import text

from san_jobs.job_service.domain.model import JobFilter, JobStats, JobStatus, JobType
from san_jobs.job_service.domain.ports import (
    CancelParams,
    ClaimParams,
    CompleteParams,
    FailParams,
    JobStore,
    ListJobsParams,
    ReleaseParams,
    RenewLeasesParams,
    RetryFailedParams,
)
from san_jobs.job_service.storage.repository import SqlJobStore
from tests.support.clock import FakeClock

Counts = dict[tuple[JobType, JobStatus], int]


def counted(stats: JobStats) -> Counts:
    return {(c.job_type, c.status): c.count for c in stats.counts}


async def listed(store: JobStore) -> Counts:
    """The counts from the jobs themselves (every page of ListJobs)."""
    found: Counter[tuple[JobType, JobStatus]] = Counter()
    token: str | None = None
    while True:
        jobs, token = await store.queries.list_jobs(
            ListJobsParams(job_filter=JobFilter(), page_size=100, page_token=token)
        )
        found.update((job.job_type, job.status) for job in jobs)
        if token is None:
            return dict(found)


async def assert_counts_exact(store: JobStore) -> Counts:
    truth = await listed(store)
    assert counted(await store.queries.stats()) == truth
    await store.queries.fold_counts()
    assert counted(await store.queries.stats()) == truth
    return truth


async def table_counts(store: SqlJobStore) -> Counts:
    async with store.engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT job_type, status, COUNT(*) FROM async_jobs GROUP BY job_type, status")
        )
        return {(JobType(t), JobStatus(s)): int(n) for t, s, n in rows}


async def test_counts_follow_every_transition(store: JobStore, clock: FakeClock) -> None:
    assert counted(await store.queries.stats()) == {}
    for i in range(6):
        await enqueue(store, f"t-{i}")
    await enqueue(store, "embed-1", job_type=JobType.EMBEDDING)
    await assert_counts_exact(store)

    claims = await store.worker.claim(
        ClaimParams(limit=4, lease_seconds=60)
    )  # PENDING -> PROCESSING
    await assert_counts_exact(store)
    first, second, third, fourth = claims
    await store.worker.complete(
        CompleteParams(job_id=first.job.id, token=first.token, result={"ok": True})
    )  # -> COMPLETED
    await store.worker.fail(
        FailParams(
            job_id=second.job.id,
            token=second.token,
            failure=failure(),
            retry_at=clock() + timedelta(seconds=5),
        )
    )
    await store.worker.fail(
        FailParams(job_id=third.job.id, token=third.token, failure=failure(), retry_at=None)
    )  # -> FAILED
    await store.worker.release(
        ReleaseParams(job_id=fourth.job.id, token=fourth.token)
    )  # -> PENDING, uncharged
    truth = await assert_counts_exact(store)
    by_status = Counter[JobStatus]()
    for (_, status), n in truth.items():
        by_status[status] += n
    assert by_status == {JobStatus.COMPLETED: 1, JobStatus.FAILED: 1, JobStatus.PENDING: 5}

    pending = [
        j
        for j in (
            await store.queries.list_jobs(
                ListJobsParams(job_filter=JobFilter(), page_size=100, page_token=None)
            )
        )[0]
        if j.status is JobStatus.PENDING
    ]
    await store.commands.cancel(
        CancelParams(job_id=pending[0].id, reason="operator")
    )  # PENDING -> CANCELLED
    running = await store.worker.claim(ClaimParams(limit=1, lease_seconds=60))
    await store.commands.cancel(
        CancelParams(job_id=running[0].job.id, reason="operator")
    )  # PROCESSING -> CANCELLED
    await assert_counts_exact(store)

    outcome = await store.commands.retry_failed(
        RetryFailedParams(
            job_filter=JobFilter(statuses=(JobStatus.FAILED,)),
            limit=100,
            dry_run=False,
            extra_attempts=1,
        )
    )
    assert outcome.retried_ids  # FAILED -> PENDING
    await assert_counts_exact(store)

    # A lease that expires with its attempts used up: PROCESSING -> FAILED (exhausted).
    last = await enqueue(store, "one-try", max_attempts=1)
    taken = [
        c
        for c in await store.worker.claim(ClaimParams(limit=100, lease_seconds=1))
        if c.job.id == last.id
    ]
    assert taken
    clock.advance(2)
    assert last.id in [j.id for j in await store.worker.fail_exhausted_leases()]
    truth = await assert_counts_exact(store)
    assert sum(truth.values()) == 8


async def test_counts_of_failed_jobs_and_retries(store: JobStore) -> None:
    for i in range(3):
        await make_failed(store, f"f-{i}", job_type=JobType.TIL_GENERATION)
    await enqueue(store, "f-0", job_type=JobType.TIL_GENERATION)  # blocks f-0's retry
    dry = await store.commands.retry_failed(
        RetryFailedParams(
            job_filter=JobFilter(job_types=(JobType.TIL_GENERATION,)),
            limit=100,
            dry_run=True,
            extra_attempts=1,
        )
    )
    assert dry.matched_count == 3
    assert counted(await store.queries.stats())[(JobType.TIL_GENERATION, JobStatus.FAILED)] == 3
    await store.commands.retry_failed(
        RetryFailedParams(
            job_filter=JobFilter(job_types=(JobType.TIL_GENERATION,)),
            limit=100,
            dry_run=False,
            extra_attempts=1,
        )
    )
    truth = await assert_counts_exact(store)
    assert truth[(JobType.TIL_GENERATION, JobStatus.FAILED)] == 1  # f-0 was skipped
    assert truth[(JobType.TIL_GENERATION, JobStatus.PENDING)] == 3


async def test_deletes_and_truncate_count(sql_store: SqlJobStore) -> None:
    """Rows deleted by any SQL (a pruner, an operator) leave the counts; TRUNCATE
    (PostgreSQL) empties them with the table."""
    for i in range(5):
        await make_failed(sql_store, f"d-{i}")
    for i in range(3):
        await enqueue(sql_store, f"p-{i}", job_type=JobType.EMBEDDING)
    async with sql_store.engine.begin() as conn:
        await conn.execute(
            text(
                "DELETE FROM async_jobs WHERE id IN"
                " (SELECT id FROM async_jobs WHERE status = 'FAILED' LIMIT 2)"
            )
        )
    assert counted(await sql_store.queries.stats()) == await table_counts(sql_store)
    assert counted(await sql_store.queries.stats())[(JobType.CARD_ANALYSIS, JobStatus.FAILED)] == 3
    await sql_store.queries.fold_counts()
    async with sql_store.engine.begin() as conn:
        await conn.execute(text("DELETE FROM async_jobs WHERE status = 'FAILED'"))
    assert counted(await sql_store.queries.stats()) == {(JobType.EMBEDDING, JobStatus.PENDING): 3}
    if sql_store.engine.dialect.name == "postgresql":
        async with sql_store.engine.begin() as conn:
            await conn.execute(text("TRUNCATE async_jobs"))
        assert counted(await sql_store.queries.stats()) == {}
        await enqueue(sql_store, "after-truncate")
        assert counted(await sql_store.queries.stats()) == {
            (JobType.CARD_ANALYSIS, JobStatus.PENDING): 1
        }


async def test_an_update_that_keeps_the_status_counts_nothing(sql_store: SqlJobStore) -> None:
    """Lease renewals (and any write leaving the status) add no delta."""
    await enqueue(sql_store, "lease")
    claims = await sql_store.worker.claim(ClaimParams(limit=1, lease_seconds=60))
    await sql_store.queries.fold_counts()
    for _ in range(3):
        await sql_store.worker.renew_leases(
            RenewLeasesParams(leases=[(claims[0].job.id, claims[0].token)], lease_seconds=60)
        )
    async with sql_store.engine.connect() as conn:
        deltas = (await conn.execute(text("SELECT COUNT(*) FROM async_job_count_deltas"))).scalar()
    assert deltas == 0


async def test_fold_moves_the_deltas_into_the_totals(sql_store: SqlJobStore) -> None:
    postgres = sql_store.engine.dialect.name == "postgresql"
    for i in range(4):
        await make_failed(sql_store, f"r-{i}")
    before = counted(await sql_store.queries.stats())

    async def rows(table: str) -> int:
        async with sql_store.engine.connect() as conn:
            return int((await conn.execute(text(f"SELECT COUNT(*) FROM {table}"))).scalar_one())

    waiting = await rows("async_job_count_deltas")
    # PostgreSQL appends deltas (4 inserts, then 2 status changes of 2 rows each:
    # 4 + 4*2*2 rows); SQLite's triggers update the totals at once.
    assert waiting == (20 if postgres else 0)
    # Two folds at once take each delta exactly once.
    folded = await asyncio.gather(sql_store.queries.fold_counts(), sql_store.queries.fold_counts())
    assert sum(folded) == waiting
    assert await rows("async_job_count_deltas") == 0
    assert counted(await sql_store.queries.stats()) == before == await table_counts(sql_store)
    async with sql_store.engine.connect() as conn:
        totals = {
            (JobType(t), JobStatus(s)): int(n)
            for t, s, n in await conn.execute(
                text("SELECT job_type, status, n FROM async_job_counts")
            )
            if n
        }
    assert totals == before
    assert await sql_store.queries.fold_counts() == 0


async def test_concurrent_writers_keep_counts_exact(
    open_store: OpenStore, clock: FakeClock
) -> None:
    """Two instances enqueue, claim, complete and fail at once while a third folds:
    the counts equal the rows. (PostgreSQL: concurrent transactions append deltas;
    SQLite: the writers take turns.)"""
    stores = [open_store("a"), open_store("b")]

    async def writer(store: JobStore, name: str) -> None:
        for i in range(30):
            await enqueue(
                store, f"{name}-{i}", job_type=(JobType.CARD_ANALYSIS, JobType.EMBEDDING)[i % 2]
            )
            for claim in await store.worker.claim(ClaimParams(limit=3, lease_seconds=60)):
                if i % 3:
                    await store.worker.complete(
                        CompleteParams(job_id=claim.job.id, token=claim.token, result={"ok": i})
                    )
                else:
                    await store.worker.fail(
                        FailParams(
                            job_id=claim.job.id, token=claim.token, failure=failure(), retry_at=None
                        )
                    )

    async def folder(store: JobStore) -> None:
        for _ in range(10):
            await store.queries.fold_counts()
            await asyncio.sleep(0)

    await asyncio.gather(writer(stores[0], "a"), writer(stores[1], "b"), folder(open_store("c")))
    truth = await assert_counts_exact(stores[0])
    assert sum(truth.values()) == 60
    if isinstance(stores[0], SqlJobStore):
        assert counted(await stores[1].queries.stats()) == await table_counts(stores[0])


@pytest.mark.postgres
async def test_concurrent_transactions_on_postgres_count_exactly(
    clean_postgres_url: str, clock: FakeClock
) -> None:
    """Many open transactions at once, each inserting and moving jobs (several
    connections: no transaction waits on another's count row); the counts equal
    COUNT(*) after all commit, and after a fold."""
    store = SqlJobStore(clean_postgres_url, instance_id="count", clock=clock)
    try:

        async def transaction(n: int) -> None:
            async with store.engine.begin() as conn:
                await conn.execute(
                    text(
                        "INSERT INTO async_jobs (id, job_type, status, target_id, request_params,"
                        " max_attempts, attempts, created_at, updated_at, due_at)"
                        " SELECT md5(:p || g)::uuid::text, 'EMBEDDING', 'PENDING', :p || g, '{}',"
                        " 3, '[]', now(), now(), now() FROM generate_series(1, 20) AS g"
                    ),
                    {"p": f"tx{n}-"},
                )
                await asyncio.sleep(0.01)  # overlap with the others' open transactions
                await conn.execute(
                    text(
                        "UPDATE async_jobs SET status = 'CANCELLED', cancelled_at = now(),"
                        " due_at = NULL WHERE target_id LIKE :p AND target_id < :cut"
                    ),
                    {"p": f"tx{n}-%", "cut": f"tx{n}-2"},
                )

        await asyncio.gather(*(transaction(n) for n in range(8)), store.queries.fold_counts())
        truth = await table_counts(store)
        assert sum(truth.values()) == 160
        assert counted(await store.queries.stats()) == truth
        await store.queries.fold_counts()
        assert counted(await store.queries.stats()) == truth
    finally:
        await store.close()
