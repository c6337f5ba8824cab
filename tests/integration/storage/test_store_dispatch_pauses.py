"""Dispatch pauses (domain/dispatch.py) and the claim that skips paused types, on every
store (conftest.py): SQLite, PostgreSQL and the memory store."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from _storage_support import OpenStore, enqueue

from san_jobs.job_service.domain.dispatch import PauseReason
from san_jobs.job_service.domain.model import JobType
from san_jobs.job_service.domain.ports import (
    ClaimParams,
    JobStore,
    OpenPauseParams,
    TakeProbeParams,
)
from tests.support.clock import FakeClock

CARD, TIL = JobType.CARD_ANALYSIS, JobType.TIL_GENERATION
FAR = datetime(2100, 1, 1, tzinfo=UTC)


async def test_no_pauses_at_first(store: JobStore) -> None:
    assert await store.pauses.dispatch_pauses() == []
    assert await store.pauses.close_pause(CARD) is False
    assert await store.pauses.take_probe(TakeProbeParams(job_type=CARD, next_probe_at=FAR)) is False


async def test_open_pause_upserts_and_keeps_since(store: JobStore, clock: FakeClock) -> None:
    began = clock.now
    first = await store.pauses.open_pause(
        OpenPauseParams(
            job_type=CARD,
            reason=PauseReason.CIRCUIT_OPEN,
            until=began + timedelta(seconds=5),
            last_error="UNAVAILABLE: down",
            instance_id="a",
        )
    )
    assert (first.job_type, first.reason, first.since) == (CARD, PauseReason.CIRCUIT_OPEN, began)
    assert first.until == began + timedelta(seconds=5)
    assert (first.last_error, first.opened_by) == ("UNAVAILABLE: down", "a")

    clock.advance(30)
    again = await store.pauses.open_pause(
        OpenPauseParams(
            job_type=CARD,
            reason=PauseReason.RATE_LIMITED,
            until=clock.now + timedelta(seconds=7),
            last_error="RATE_LIMITED",
            instance_id="b",
        )
    )
    # Renewed: everything but `since` (the outage's start) is replaced.
    assert again.since == began
    assert (again.reason, again.opened_by, again.last_error) == (
        PauseReason.RATE_LIMITED,
        "b",
        "RATE_LIMITED",
    )
    assert again.until == clock.now + timedelta(seconds=7)
    assert await store.pauses.dispatch_pauses() == [again]

    assert await store.pauses.close_pause(CARD) is True
    assert await store.pauses.close_pause(CARD) is False
    assert await store.pauses.dispatch_pauses() == []
    # A new outage begins a new `since`.
    reopened = await store.pauses.open_pause(
        OpenPauseParams(
            job_type=CARD,
            reason=PauseReason.CIRCUIT_OPEN,
            until=clock.now,
            last_error="UNAVAILABLE",
            instance_id="a",
        )
    )
    assert reopened.since == clock.now


async def test_take_probe_is_a_compare_and_set(store: JobStore, clock: FakeClock) -> None:
    until = clock.now + timedelta(seconds=5)
    await store.pauses.open_pause(
        OpenPauseParams(
            job_type=CARD,
            reason=PauseReason.CIRCUIT_OPEN,
            until=until,
            last_error="UNAVAILABLE",
            instance_id="a",
        )
    )
    assert (
        await store.pauses.take_probe(
            TakeProbeParams(job_type=CARD, next_probe_at=clock.now + timedelta(seconds=5))
        )
        is False
    )  # not yet
    clock.advance(5)
    next_probe = clock.now + timedelta(seconds=5)
    assert (
        await store.pauses.take_probe(TakeProbeParams(job_type=CARD, next_probe_at=next_probe))
        is True
    )
    assert (
        await store.pauses.take_probe(TakeProbeParams(job_type=CARD, next_probe_at=next_probe))
        is False
    )  # taken
    (pause,) = await store.pauses.dispatch_pauses()
    assert pause.until == next_probe
    assert (
        await store.pauses.take_probe(TakeProbeParams(job_type=TIL, next_probe_at=next_probe))
        is False
    )  # not paused


async def test_take_probe_race_between_instances_has_one_winner(
    open_store: OpenStore, clock: FakeClock
) -> None:
    stores = [open_store(f"instance-{i}") for i in range(2)]
    await stores[0].pauses.open_pause(
        OpenPauseParams(
            job_type=CARD,
            reason=PauseReason.CIRCUIT_OPEN,
            until=clock.now,
            last_error="UNAVAILABLE",
            instance_id="i0",
        )
    )
    for _ in range(5):
        next_probe = clock.now + timedelta(seconds=1)
        won = await asyncio.gather(
            *(
                s.pauses.take_probe(TakeProbeParams(job_type=CARD, next_probe_at=next_probe))
                for s in stores
            )
        )
        assert sorted(won) == [False, True]
        clock.advance(1)


async def test_claim_skips_paused_types_and_a_probe_takes_one_of_one_type(
    store: JobStore, clock: FakeClock
) -> None:
    cards, tils = [], []
    for i in range(3):
        cards.append(await enqueue(store, f"card-{i}", job_type=CARD))
        tils.append(await enqueue(store, f"til-{i}", job_type=TIL))
        clock.advance(1)
    probe = await store.worker.claim(
        ClaimParams(limit=1, lease_seconds=60, skip_types=frozenset({CARD}), only_type=CARD)
    )
    assert probe == []  # a skipped type is never claimed, not even by a probe
    probe = await store.worker.claim(ClaimParams(limit=1, lease_seconds=60, only_type=CARD))
    assert [c.job.id for c in probe] == [cards[0].id]
    claimed = await store.worker.claim(
        ClaimParams(limit=10, lease_seconds=60, skip_types=frozenset({CARD}))
    )
    assert [c.job.id for c in claimed] == [j.id for j in tils]
    assert (
        await store.worker.claim(
            ClaimParams(limit=10, lease_seconds=60, skip_types=frozenset({CARD, TIL}))
        )
        == []
    )
    rest = await store.worker.claim(ClaimParams(limit=10, lease_seconds=60))
    assert sorted(c.job.id for c in rest) == sorted(j.id for j in cards[1:])
