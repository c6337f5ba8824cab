"""The operator queries read indexes, not the whole table (PostgreSQL plans).

With a few thousand finished jobs and fresh statistics, EXPLAIN shows no sequential
scan of async_jobs in stats() and in RetryFailed's candidates filtered by type and
time: what keeps them fast at ten million rows; on SQLite, stats() searches
the same partial indexes (bench/bench_big_table.py has the
times). Plans, not times, are asserted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from _storage_support import enqueue
from sqlalchemy import text
from sqlalchemy.dialects import postgresql

from san_jobs.job_service.domain.model import JobFilter, JobStatus, JobType
from san_jobs.job_service.domain.ports import RetryFailedParams
from san_jobs.job_service.storage import counts, queries
from san_jobs.job_service.storage.repository import SqlJobStore
from tests.support.clock import FakeClock

ROWS = 6_000

# Finished jobs over the 10 days before the test's clock: 85 % COMPLETED, 12 % FAILED,
# 3 % CANCELLED, four job types.
LOAD = f"""
INSERT INTO async_jobs (id, job_type, status, target_id, request_params, max_attempts,
    attempts, error_message, created_at, updated_at, completed_at, failed_at, cancelled_at)
SELECT md5('plan-' || g)::uuid::text,
    (ARRAY['CARD_ANALYSIS', 'TIL_GENERATION', 'RECALL_GENERATION', 'EMBEDDING'])[1 + (g / 7) % 4],
    s.status, 'target-' || g, '{{}}', 3, '[]',
    CASE WHEN s.status = 'FAILED' THEN 'upstream answered 503' END,
    s.at, s.at,
    CASE WHEN s.status = 'COMPLETED' THEN s.at END,
    CASE WHEN s.status = 'FAILED' THEN s.at END,
    CASE WHEN s.status = 'CANCELLED' THEN s.at END
FROM generate_series(1, {ROWS}) AS g
CROSS JOIN LATERAL (
    SELECT CASE WHEN g % 100 < 85 THEN 'COMPLETED' WHEN g % 100 < 97 THEN 'FAILED'
                ELSE 'CANCELLED' END AS status,
           CAST(:start AS timestamptz) + interval '10 days' * (g::float8 / {ROWS}) AS at
) AS s
"""


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


async def explain(
    store: SqlJobStore, statement: Any, params: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    sql = str(
        statement.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True})
    )
    async with store.engine.connect() as conn:
        raw = (await conn.execute(text(f"EXPLAIN (FORMAT JSON) {sql}"), params or {})).scalar_one()
    document = raw if isinstance(raw, list) else json.loads(raw)
    return list(nodes(document[0]["Plan"]))


def scans_of_jobs(plan: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    """(node type, index name) of every node reading async_jobs."""
    return [
        (node["Node Type"], node.get("Index Name"))
        for node in plan
        if node.get("Relation Name") == "async_jobs"
    ]


@pytest.fixture
async def big_store(clean_postgres_url: str, clock: FakeClock) -> Any:
    store = SqlJobStore(clean_postgres_url, instance_id="plans", clock=clock)
    start = clock() - timedelta(days=10)
    async with store.engine.begin() as conn:
        await conn.execute(text(LOAD), {"start": start})
    for i in range(20):
        await enqueue(
            store, f"queued-{i}", job_type=(JobType.CARD_ANALYSIS, JobType.EMBEDDING)[i % 2]
        )
    async with store.engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text("VACUUM ANALYZE async_jobs"))
    yield store
    await store.close()


@pytest.mark.postgres
async def test_stats_reads_counts_and_pending_indexes_only(
    big_store: SqlJobStore, clock: FakeClock
) -> None:
    plan = await explain(big_store, counts.stats_statement().bindparams(now=clock()))
    scans = scans_of_jobs(plan)
    assert scans, plan
    assert all("Seq Scan" not in kind for kind, _ in scans), scans
    used = {index for _, index in scans}
    assert used <= {"ix_async_jobs_pending_created_at", "ix_async_jobs_pending_type_due"}, scans
    assert "ix_async_jobs_pending_type_due" in used
    # And the answer is the table's.
    stats = await big_store.queries.stats()
    assert sum(c.count for c in stats.counts) == ROWS + 20
    assert set(stats.oldest_due_by_type) == {JobType.CARD_ANALYSIS, JobType.EMBEDDING}


@pytest.mark.postgres
async def test_retry_failed_by_type_and_time_uses_a_failed_index(
    big_store: SqlJobStore, clock: FakeClock
) -> None:
    now = clock()
    job_filter = JobFilter(
        job_types=(JobType.EMBEDDING,),
        failed_after=now - timedelta(days=3),
        failed_before=now - timedelta(days=2),
    )
    statement = queries.retry_candidates(queries.job_filter(job_filter, True), 1000, lock=False)
    scans = scans_of_jobs(await explain(big_store, statement))
    assert scans and all("Seq Scan" not in kind for kind, _ in scans), scans
    assert {index for _, index in scans} <= {
        "ix_async_jobs_failed_type_at",
        "ix_async_jobs_failed_at",
    }, scans
    outcome = await big_store.commands.retry_failed(
        RetryFailedParams(job_filter=job_filter, limit=1000, dry_run=True, extra_attempts=1)
    )
    assert 0 < outcome.matched_count < ROWS * 12 // 100 // 4
    # ListJobs of FAILED jobs of one type: an index too.
    page = queries.page(
        queries.job_filter(
            JobFilter(statuses=(JobStatus.FAILED,), job_types=(JobType.EMBEDDING,)), True
        ),
        50,
        None,
    )
    scans = scans_of_jobs(await explain(big_store, page))
    assert scans and all("Seq Scan" not in kind for kind, _ in scans), scans


async def test_stats_on_sqlite_searches_the_pending_indexes(sqlite_url: str) -> None:
    """SQLite uses a partial index only when the query repeats its predicate: the stats
    statement does, so it searches the PENDING indexes instead of scanning the table."""
    store = SqlJobStore(sqlite_url, instance_id="plans")
    try:
        sql = str(counts.stats_statement().compile(compile_kwargs={"literal_binds": False}))
        async with store.engine.connect() as conn:
            plan = [
                str(row[-1])
                for row in await conn.execute(
                    text(f"EXPLAIN QUERY PLAN {sql}"), {"now": "2025-01-01 00:00:00.000000"}
                )
            ]
    finally:
        await store.close()
    on_jobs = [step for step in plan if "async_jobs " in f"{step} "]
    assert on_jobs, plan
    assert all(step.startswith("SEARCH") for step in on_jobs), plan
    assert any("ix_async_jobs_pending_type_due" in step for step in on_jobs), plan
    assert any("ix_async_jobs_pending_created_at" in step for step in on_jobs), plan
