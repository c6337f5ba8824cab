"""Real concurrent connections: many claimers, many retry_failed callers.

PostgreSQL is where this matters (several instances share it); SQLite runs the same
cases through its single writer, the memory store through its atomic calls."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from _storage_support import OpenStore, make_failed, new_job

from san_jobs.job_service.domain.model import JobFilter, JobStatus, OnDuplicate
from san_jobs.job_service.domain.ports import (
    ClaimParams,
    EnqueueParams,
    JobStore,
    RetryFailedParams,
)
from san_jobs.job_service.storage.repository import SqlJobStore
from tests.support.clock import FakeClock


async def _enqueue_many(store: JobStore, count: int, prefix: str) -> list[str]:
    ids = []
    for i in range(count):
        job, _ = await store.commands.enqueue(
            EnqueueParams(job=new_job(f"{prefix}-{i}"), on_duplicate=OnDuplicate.REJECT)
        )
        ids.append(job.id)
    return ids


async def test_concurrent_claimers_never_share_a_job(open_store: OpenStore) -> None:
    # Separate stores (engines) stand for separate instances; each task its own claims.
    stores = [open_store(f"i{n}") for n in range(4)]
    try:
        ids = await _enqueue_many(stores[0], 500, "cc")
        claimed: list[str] = []

        async def claimer(store: JobStore) -> None:
            while True:
                claims = await store.worker.claim(ClaimParams(limit=7, lease_seconds=60))
                if not claims:
                    return
                claimed.extend(c.job.id for c in claims)
                await asyncio.sleep(0)

        await asyncio.gather(*(claimer(stores[n % 4]) for n in range(8)))
        counts = Counter(claimed)
        assert [job_id for job_id, n in counts.items() if n > 1] == []
        assert set(claimed) == set(ids)
        stats = await stores[0].queries.stats()
        assert {c.status: c.count for c in stats.counts} == {JobStatus.PROCESSING: 500}
    finally:
        for store in stores:
            await store.close()


async def test_concurrent_retry_failed_moves_each_job_once(open_store: OpenStore) -> None:
    stores = [open_store(f"i{n}") for n in range(5)]
    try:
        failed = [(await make_failed(stores[0], f"rf-{i}")).id for i in range(50)]
        outcomes = await asyncio.gather(
            *(
                stores[n % 5].commands.retry_failed(
                    RetryFailedParams(
                        job_filter=JobFilter(), limit=1000, dry_run=False, extra_attempts=1
                    )
                )
                for n in range(10)
            )
        )
        moved = Counter(job_id for o in outcomes for job_id in o.retried_ids)
        assert set(moved) == set(failed)
        assert set(moved.values()) == {1}
        jobs = await stores[0].queries.get_many(failed)
        assert {j.status for j in jobs} == {JobStatus.PENDING}
        assert {j.max_attempts for j in jobs} == {2}
    finally:
        for store in stores:
            await store.close()


@pytest.mark.postgres
async def test_retry_failed_skips_a_duplicate_that_appears_mid_call(
    clean_postgres_url: str, clock: FakeClock
) -> None:
    """The pre-check passed but an active job took the slot before the UPDATE: the
    unique index refuses that one job, the rest still move."""
    store = SqlJobStore(clean_postgres_url, instance_id="a", clock=clock)
    try:
        blocked = await make_failed(store, "mid-a")
        free = await make_failed(store, "mid-b")
        original = store.commands._active_by_target

        async def precheck_then_race(conn, targets):  # type: ignore[no-untyped-def]
            found = await original(conn, targets)
            await store.commands.enqueue(
                EnqueueParams(job=new_job("mid-a"), on_duplicate=OnDuplicate.REJECT)
            )  # another connection
            return found

        store.commands._active_by_target = precheck_then_race  # type: ignore[method-assign]
        outcome = await store.commands.retry_failed(
            RetryFailedParams(job_filter=JobFilter(), limit=100, dry_run=False, extra_attempts=1)
        )
        assert outcome.retried_ids == (free.id,)
        assert len(outcome.skipped) == 1 and outcome.skipped[0][0] == blocked.id
        assert "an active job exists for this job type and target: " in outcome.skipped[0][1]
    finally:
        await store.close()
