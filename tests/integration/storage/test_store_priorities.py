"""Priorities on every store (conftest.py): among due jobs the most urgent is claimed
first, and the anti-starvation share (domain/priorities.py, README "Priorities")
holds: one claimed job in ten, at least, is taken by age whatever its priority."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from _storage_support import new_job
from sqlalchemy import text

from san_jobs.job_service.domain.claim_limits import TypeLimit
from san_jobs.job_service.domain.model import Job, JobType, OnDuplicate
from san_jobs.job_service.domain.ports import (
    ClaimParams,
    EnqueueParams,
    JobStore,
    LimitedClaimParams,
)
from san_jobs.job_service.domain.priorities import AGE_SHARE
from san_jobs.job_service.domain.transitions import claim_type_args
from san_jobs.job_service.storage.repository import SqlJobStore
from san_jobs.job_service.storage.statements import HOT_SESSION, P_LIMIT
from san_jobs.job_service.storage.transition_sql import Params, time_params
from tests.support.clock import FakeClock


async def enqueue(
    store: JobStore,
    target_id: str,
    priority: int,
    job_type: JobType = JobType.CARD_ANALYSIS,
    **kwargs: Any,
) -> Job:
    new = replace(new_job(target_id, job_type), priority=priority, **kwargs)
    job, _ = await store.commands.enqueue(EnqueueParams(job=new, on_duplicate=OnDuplicate.REJECT))
    return job


async def test_priority_is_stored_and_read_back(store: JobStore) -> None:
    job = await enqueue(store, "p1", 1)
    assert job.priority == 1
    assert (await store.queries.get(job.id)).priority == 1
    (claim,) = await store.worker.claim(ClaimParams(limit=1, lease_seconds=60))
    assert claim.job.priority == 1


async def test_the_most_urgent_due_job_is_claimed_first(store: JobStore, clock: FakeClock) -> None:
    old_low = [await enqueue(store, f"low-{i}", 5) for i in range(3)]
    clock.advance(1)
    normal = await enqueue(store, "normal", 3)
    clock.advance(1)
    # Urgent but not due: a delayed job is not claimed before its time.
    later = clock.now + timedelta(minutes=5)
    await enqueue(store, "later", 1, scheduled_at=later, not_before=later)
    clock.advance(1)
    urgent = await enqueue(store, "urgent", 1)
    clock.advance(1)
    also_urgent = await enqueue(store, "urgent-2", 1)
    # A fresh store's first claim is by priority (no job was claimed yet, so the share
    # by age owes nothing): the two urgent ones, oldest first, then the normal one.
    claims = await store.worker.claim(ClaimParams(limit=3, lease_seconds=60))
    assert {c.job.id for c in claims} == {urgent.id, also_urgent.id, normal.id}
    # The next claim is the share's (3 claimed, none by age): the oldest due job.
    (by_age,) = await store.worker.claim(ClaimParams(limit=1, lease_seconds=60))
    assert by_age.job.id == old_low[0].id


async def test_a_steady_urgent_stream_leaves_one_claim_in_ten_to_the_oldest(
    store: JobStore, clock: FakeClock
) -> None:
    """One job claimed at a time while a new priority-1 job arrives before each claim:
    the priority-5 backlog still gets claims 2, 12, 22, 32 (after each, the claims by
    age are a tenth of all claims), oldest first; every other claim is urgent."""
    backlog = [await enqueue(store, f"backlog-{i}", 5) for i in range(5)]
    clock.advance(1)
    taken: list[Job] = []
    for i in range(40):
        await enqueue(store, f"urgent-{i}", 1)
        clock.advance(0.01)
        (claim,) = await store.worker.claim(ClaimParams(limit=1, lease_seconds=60))
        taken.append(claim.job)
    low = [n for n, job in enumerate(taken, start=1) if job.priority == 5]
    assert low == [2, 12, 22, 32]
    assert [taken[n - 1].id for n in low] == [job.id for job in backlog[:4]]


async def test_the_share_holds_for_batches_of_claims(store: JobStore, clock: FakeClock) -> None:
    """Claims of 10 while 10 urgent jobs arrive before each: after every claim the
    jobs taken by age are at least a tenth of those claimed, less one claim's worth."""
    for i in range(100):
        await enqueue(store, f"backlog-{i}", 5)
    clock.advance(1)
    claimed = low = 0
    for round_ in range(30):
        for i in range(10):
            await enqueue(store, f"urgent-{round_}-{i}", 1)
        clock.advance(0.01)
        claims = await store.worker.claim(ClaimParams(limit=10, lease_seconds=60))
        assert len(claims) == 10
        claimed += len(claims)
        low += sum(1 for c in claims if c.job.priority == 5)
        assert low >= claimed / AGE_SHARE - 10, (round_, low, claimed)
    assert low >= claimed / AGE_SHARE


async def test_fair_share_claims_by_priority_too(store: JobStore, clock: FakeClock) -> None:
    await enqueue(store, "low", 5)
    clock.advance(1)
    urgent = await enqueue(store, "urgent", 1)
    claims = await store.worker.claim(ClaimParams(limit=1, lease_seconds=60, max_per_caller=5))
    assert [c.job.id for c in claims] == [urgent.id]


async def test_a_limited_type_is_claimed_by_priority_too(store: JobStore, clock: FakeClock) -> None:
    await enqueue(store, "low", 5)
    clock.advance(1)
    urgent = await enqueue(store, "urgent", 1)
    taken = await store.worker.claim_limited(
        LimitedClaimParams(
            job_type=JobType.CARD_ANALYSIS,
            limit=1,
            lease_seconds=60,
            type_limit=TypeLimit(max_running=10),
        )
    )
    assert [c.job.id for c in taken.claims] == [urgent.id]


# -- the plan on PostgreSQL -------------------------------------------------------------

BACKLOG = 20_000

LOAD_BACKLOG = f"""
INSERT INTO async_jobs (id, job_type, status, target_id, request_params, requested_by,
    max_attempts, attempts, created_at, updated_at, due_at, priority, tenant)
SELECT md5('backlog-' || g)::uuid::text, 'CARD_ANALYSIS', 'PENDING', 'backlog-' || g,
    '{{}}', 'tester', 3, '[]', t.at, t.at, t.at, 5, ''
FROM generate_series(1, {BACKLOG}) AS g
CROSS JOIN LATERAL (
    SELECT CAST(:start AS timestamptz) + interval '1 second' * g AS at
) AS t
"""


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    out = [plan]
    for child in plan.get("Plans", []):
        out += _nodes(child)
    return out


def text_plan(nodes: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"{n['Node Type']} {n.get('Index Name', '')} {n.get('Sort Key', '')}" for n in nodes
    )


@pytest.mark.postgres
async def test_the_claim_by_priority_is_an_index_range_on_postgres(
    clean_postgres_url: str, clock: FakeClock
) -> None:
    """A backlog of 20,000 due priority-5 jobs (fresh statistics): the claim by
    priority reads ix_async_jobs_due_priority in its order and sorts nothing, under the
    session the hot statements run in (HOT_SESSION), and takes the urgent job."""
    store = SqlJobStore(clean_postgres_url, instance_id="plans", clock=clock)
    try:
        async with store.engine.begin() as conn:
            await conn.execute(text(LOAD_BACKLOG), {"start": clock() - timedelta(days=1)})
        urgent = await enqueue(store, "urgent", 1)
        async with store.engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(text("VACUUM ANALYZE async_jobs"))
        claim_urgent: Any = store._sql.claim_urgent
        bound = time_params(clock(), 60) | {P_LIMIT: 20} | Params.bind(**claim_type_args((), None))
        compiled = claim_urgent.params(**bound).compile(
            dialect=store.engine.dialect, compile_kwargs={"literal_binds": True}
        )
        async with store.engine.connect() as conn:
            for setting in HOT_SESSION:
                await conn.execute(text(setting))
            raw = (await conn.execute(text(f"EXPLAIN (FORMAT JSON) {compiled}"))).scalar_one()
        document = raw if isinstance(raw, list) else json.loads(raw)
        nodes = _nodes(document[0]["Plan"])
        scans = [
            (n["Node Type"], n.get("Index Name"))
            for n in nodes
            if n.get("Relation Name") == "async_jobs"
        ]
        assert ("Index Scan", "ix_async_jobs_due_priority") in scans, scans
        assert all("Seq Scan" not in kind and "Bitmap" not in kind for kind, _ in scans), scans
        # The only Sort is the notification's, over the few rows claimed (statements.py).
        sorts = [n for n in nodes if n["Node Type"] == "Sort"]
        assert not any(
            "due_at" in key or "priority" in key for n in sorts for key in n["Sort Key"]
        ), text_plan(nodes)
        claims = await store.worker.claim(ClaimParams(limit=1, lease_seconds=60))
        assert [c.job.id for c in claims] == [urgent.id]
    finally:
        await store.close()


async def test_the_claim_by_priority_searches_its_index_on_sqlite(sqlite_url: str) -> None:
    """SQLite reads ix_async_jobs_due_priority in its order (no temp B-tree to sort)."""
    store = SqlJobStore(sqlite_url, instance_id="plans")
    try:
        bound = (
            time_params(datetime(2025, 1, 1, tzinfo=UTC), 60)
            | {P_LIMIT: 10}
            | Params.bind(**claim_type_args((), None))
        )
        compiled = store._sql.claim_urgent.compile(dialect=store.engine.dialect)
        values = compiled.construct_params(bound)
        args = tuple(values[name] for name in compiled.positiontup or ())
        async with store.engine.connect() as conn:
            rows = await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled.string}", args)
            plan = [str(row[-1]) for row in rows]
    finally:
        await store.close()
    assert any("ix_async_jobs_due_priority" in step for step in plan), plan
    assert not any("TEMP B-TREE" in step for step in plan), plan
