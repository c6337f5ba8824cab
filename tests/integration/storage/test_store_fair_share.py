"""Fair share (--max-running-per-caller): JobStore.claim with max_per_caller on every
store (conftest.py): SQLite, PostgreSQL and the memory store."""

from __future__ import annotations

from collections import Counter

from _storage_support import OpenStore

from san_jobs.job_service.domain.claim_limits import TypeLimit
from san_jobs.job_service.domain.model import Claim, JobType, NewJob, OnDuplicate
from san_jobs.job_service.domain.ports import (
    ClaimParams,
    CompleteParams,
    EnqueueParams,
    JobStore,
    LimitedClaimParams,
)
from tests.support.clock import FakeClock

CARD, TIL = JobType.CARD_ANALYSIS, JobType.TIL_GENERATION


async def _enqueue(
    store: JobStore, caller: str, count: int, clock: FakeClock, job_type: JobType = CARD
) -> None:
    for n in range(count):
        new = NewJob(job_type, f"{caller}-{n}", {"text": "x"}, caller, None, 3)
        await store.commands.enqueue(EnqueueParams(job=new, on_duplicate=OnDuplicate.REJECT))
        clock.advance(0.001)  # each job due after the one before


def callers(claims: list[Claim]) -> Counter[str]:
    return Counter(c.job.requested_by for c in claims)


async def test_a_backlog_does_not_starve_a_later_caller(store: JobStore, clock: FakeClock) -> None:
    await _enqueue(store, "big", 50, clock)
    await _enqueue(store, "small", 4, clock)
    first = await store.worker.claim(ClaimParams(limit=10, lease_seconds=60, max_per_caller=5))
    # Oldest due first, but no caller past five running.
    assert callers(first) == {"big": 5, "small": 4}
    # Each caller's oldest jobs.
    assert sorted(c.job.target_id for c in first if c.job.requested_by == "big") == [
        f"big-{n}" for n in range(5)
    ]
    assert (
        await store.worker.claim(ClaimParams(limit=10, lease_seconds=60, max_per_caller=5)) == []
    )  # big is at its five
    done = next(c for c in first if c.job.requested_by == "big")
    await store.worker.complete(
        CompleteParams(job_id=done.job.id, token=done.token, result={"summary": "ok"})
    )
    assert callers(
        await store.worker.claim(ClaimParams(limit=10, lease_seconds=60, max_per_caller=5))
    ) == {"big": 1}


async def test_running_jobs_count_on_every_instance(
    open_store: OpenStore, clock: FakeClock
) -> None:
    first, second = open_store("a"), open_store("b")
    await _enqueue(first, "big", 20, clock)
    assert callers(
        await first.worker.claim(ClaimParams(limit=3, lease_seconds=60, max_per_caller=5))
    ) == {"big": 3}
    await _enqueue(first, "small", 3, clock)
    assert callers(
        await second.worker.claim(ClaimParams(limit=10, lease_seconds=60, max_per_caller=5))
    ) == {"big": 2, "small": 3}


async def test_without_the_setting_the_oldest_go_first(store: JobStore, clock: FakeClock) -> None:
    await _enqueue(store, "big", 20, clock)
    await _enqueue(store, "small", 4, clock)
    assert callers(await store.worker.claim(ClaimParams(limit=10, lease_seconds=60))) == {"big": 10}


async def test_fair_share_with_skip_types_and_limits(store: JobStore, clock: FakeClock) -> None:
    await _enqueue(store, "big", 10, clock, TIL)
    await _enqueue(store, "big", 10, clock)
    await _enqueue(store, "small", 2, clock)
    limited = await store.worker.claim_limited(
        LimitedClaimParams(
            job_type=CARD,
            limit=10,
            lease_seconds=60,
            type_limit=TypeLimit(max_running=8),
            max_per_caller=3,
        )
    )
    assert callers(limited.claims) == {"big": 3, "small": 2}
    # TIL skipped, CARD's callers at three and at their last job: nothing more.
    assert (
        await store.worker.claim(
            ClaimParams(limit=10, lease_seconds=60, skip_types=frozenset({TIL}), max_per_caller=3)
        )
        == []
    )
    assert (
        await store.worker.claim(ClaimParams(limit=10, lease_seconds=60, max_per_caller=3)) == []
    )  # big's TIL count too
