"""Claim limits (domain/claim_limits.py): JobStore.claim_limited on every store
(conftest.py): SQLite, PostgreSQL and the memory store; several instances share one
type's token bucket and running count."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from _storage_support import OpenStore, enqueue

from san_jobs.job_service.domain.claim_limits import (
    CONCURRENCY_RECHECK_SECONDS,
    LimitedClaim,
    TypeLimit,
)
from san_jobs.job_service.domain.model import JobStatus, JobType
from san_jobs.job_service.domain.ports import (
    ClaimParams,
    CompleteParams,
    JobStore,
    LimitedClaimParams,
)
from san_jobs.job_service.storage.repository import SqlJobStore
from tests.support.clock import FakeClock

CARD, TIL = JobType.CARD_ANALYSIS, JobType.TIL_GENERATION


async def claim_limited(store: JobStore, jobs: int, limit: TypeLimit) -> LimitedClaim:
    """Up to `jobs` CARD_ANALYSIS jobs, 60 s leases, within `limit`."""
    return await store.worker.claim_limited(
        LimitedClaimParams(job_type=CARD, limit=jobs, lease_seconds=60, type_limit=limit)
    )


async def _enqueue_many(store: JobStore, count: int, job_type: JobType = CARD) -> None:
    for n in range(count):
        await enqueue(store, f"{job_type.value}-{n}", job_type=job_type)


async def test_rate_limit_grants_the_burst_then_the_rate(store: JobStore, clock: FakeClock) -> None:
    await _enqueue_many(store, 30)
    await _enqueue_many(store, 2, TIL)
    limit = TypeLimit(per_second=20)  # burst 2
    first = await claim_limited(store, 10, limit)
    assert len(first.claims) == 2
    assert {c.job.job_type for c in first.claims} == {CARD}  # only the type asked for
    assert all(c.job.status is JobStatus.PROCESSING and c.token for c in first.claims)
    # The bucket is empty: a whole token is 1/20 s away.
    assert first.wait_seconds == pytest.approx(0.05)
    assert (await claim_limited(store, 10, limit)).claims == []

    clock.advance(0.1)  # two tokens more
    assert len((await claim_limited(store, 10, limit)).claims) == 2
    clock.advance(10)  # the bucket holds the burst at most
    assert len((await claim_limited(store, 10, limit)).claims) == 2
    # Another type's jobs were left alone.
    assert (
        len(await store.worker.claim(ClaimParams(limit=10, lease_seconds=60, only_type=TIL))) == 2
    )


async def test_tokens_not_used_stay_in_the_bucket(store: JobStore, clock: FakeClock) -> None:
    limit = TypeLimit(per_second=10)  # burst 1
    nothing = await claim_limited(store, 5, limit)
    assert nothing.claims == [] and nothing.wait_seconds is None  # no limit held it back
    await _enqueue_many(store, 3)
    assert len((await claim_limited(store, 5, limit)).claims) == 1
    assert (await claim_limited(store, 5, limit)).claims == []
    clock.advance(0.05)  # half a token: not yet
    held = await claim_limited(store, 5, limit)
    assert held.claims == [] and held.wait_seconds == pytest.approx(0.05)
    clock.advance(0.05)
    assert len((await claim_limited(store, 5, limit)).claims) == 1


async def test_instances_share_the_bucket(open_store: OpenStore, clock: FakeClock) -> None:
    first, second, third = open_store("a"), open_store("b"), open_store("c")
    await _enqueue_many(first, 50)
    limit = TypeLimit(per_second=20)
    taken = 0
    for _ in range(10):  # one second in tenths: 2 at first, then 2 a tenth
        results = await asyncio.gather(
            *(claim_limited(s, 10, limit) for s in (first, second, third))
        )
        taken += sum(len(r.claims) for r in results)
        clock.advance(0.1)
    # The burst, plus 20/s for the nine tenths after it, across all three.
    assert taken == 2 + 9 * 2


async def test_concurrency_limit_counts_every_instance(
    open_store: OpenStore, clock: FakeClock
) -> None:
    first, second = open_store("a"), open_store("b")
    await _enqueue_many(first, 10)
    await _enqueue_many(first, 3, TIL)
    limit = TypeLimit(max_running=3)
    mine = await claim_limited(first, 2, limit)
    assert len(mine.claims) == 2 and mine.wait_seconds is None  # asked for 2, got 2
    theirs = await claim_limited(second, 10, limit)
    assert len(theirs.claims) == 1
    assert theirs.wait_seconds == CONCURRENCY_RECHECK_SECONDS
    assert (await claim_limited(first, 10, limit)).claims == []
    # Other types' running jobs do not count.
    assert (
        len(await second.worker.claim(ClaimParams(limit=10, lease_seconds=60, only_type=TIL))) == 3
    )
    # A job that ends frees its slot.
    done = mine.claims[0]
    await first.worker.complete(
        CompleteParams(job_id=done.job.id, token=done.token, result={"summary": "ok"})
    )
    assert len((await claim_limited(second, 10, limit)).claims) == 1


async def test_rate_and_concurrency_together(store: JobStore, clock: FakeClock) -> None:
    await _enqueue_many(store, 10)
    limit = TypeLimit(per_second=30, max_running=4)  # burst 3
    assert len((await claim_limited(store, 10, limit)).claims) == 3
    clock.advance(1)
    held = await claim_limited(store, 10, limit)
    assert len(held.claims) == 1  # the running limit, not the rate, held it
    assert held.wait_seconds == CONCURRENCY_RECHECK_SECONDS


async def test_instances_racing_never_pass_the_concurrency_limit(
    open_store: OpenStore, clock: FakeClock
) -> None:
    stores = [open_store(name) for name in "abcdef"]
    await _enqueue_many(stores[0], 120)
    limit = TypeLimit(max_running=3)
    for _ in range(20):  # each round: all race for the slots, then the jobs end
        results = await asyncio.gather(*(claim_limited(s, 10, limit) for s in stores))
        taken = [(s, c) for s, r in zip(stores, results, strict=True) for c in r.claims]
        assert len(taken) == 3
        for owner, claim in taken:
            await owner.worker.complete(
                CompleteParams(job_id=claim.job.id, token=claim.token, result={"summary": "ok"})
            )


class _CountHook:
    """A connection that runs `before_count` just before the claim counts the type's
    running jobs: the moment another instance's completion may commit."""

    def __init__(self, conn: Any, count_statement: Any, before_count: Any) -> None:
        self._conn, self._count, self._before = conn, count_statement, before_count

    async def execute(self, statement: Any, *args: Any) -> Any:
        if statement is self._count and self._before is not None:
            before, self._before = self._before, None
            await before()
        return await self._conn.execute(statement, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


@pytest.mark.postgres
async def test_a_start_is_never_dated_before_the_end_that_freed_its_slot(
    clean_postgres_url: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Instance b waits for the type's lock, then counts the running jobs; a's job
    completes and commits between the two. b's claim sees the slot free, so its
    attempt must start after that end: dated earlier, the attempts' records showed
    more jobs running at once than --concurrency-limit allows (seen as 8 of 4 in
    test_claim_limits under load)."""
    a = SqlJobStore(clean_postgres_url, instance_id="a", clock=clock)
    b = SqlJobStore(clean_postgres_url, instance_id="b", clock=clock)
    try:
        await _enqueue_many(a, 2)
        limit = TypeLimit(max_running=1)
        (running,) = (await claim_limited(a, 1, limit)).claims

        async def complete_on_a() -> None:
            clock.advance(0.5)
            await a.worker.complete(CompleteParams(running.job.id, running.token, {"summary": "s"}))

        real_tx = b._db.tx

        @contextlib.asynccontextmanager
        async def hooked_tx() -> AsyncIterator[Any]:
            async with real_tx() as conn:
                yield _CountHook(conn, b._sql.running_of_type, complete_on_a)

        monkeypatch.setattr(b._db, "tx", hooked_tx)
        (started,) = (await claim_limited(b, 1, limit)).claims
        ended = (await a.queries.get(running.job.id)).attempts[-1].end_time
        assert ended is not None
        assert started.job.attempts[-1].start_time >= ended
    finally:
        await a.close()
        await b.close()
