"""Schedules on SQLite, PostgreSQL (storage/schedules.py) and the memory store
(storage/memory_schedules.py): create/get/list/delete,
pause/resume, tenant scoping, and the firing round: two stores (two instances) racing
for one due period make one job; an overlapping period is skipped and counted;
missed periods beyond the catch-up window are skipped, those within it fired.

PostgreSQL judges schedules by its own clock, so these tests run on real time: a
schedule is made due by moving its row's times into the past with SQL, and the
SQLite store's clock is set to the real time as well."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text, update

from san_jobs.job_service.domain.model import JobStatus, JobType, OnDuplicate
from san_jobs.job_service.domain.ports import CancelParams, ScheduleStore
from san_jobs.job_service.domain.schedules import (
    NewSchedule,
    ScheduleDefinition,
    ScheduleExistsError,
    ScheduleTemplate,
    period_request_id,
)
from san_jobs.job_service.storage.memory import MemoryJobStore, MemoryTable
from san_jobs.job_service.storage.repository import SqlJobStore
from san_jobs.job_service.storage.tables import job_schedules
from tests.support.clock import FakeClock


def definition(
    *, interval: float = 60, catchup: float = 0, target: str = "day-1"
) -> ScheduleDefinition:
    return ScheduleDefinition(
        template=ScheduleTemplate(
            job_type=JobType.CARD_ANALYSIS,
            target_id=target,
            request_params={"text": "hello"},
            max_attempts=3,
            priority=3,
            on_duplicate=OnDuplicate.REJECT,
        ),
        interval=timedelta(seconds=interval),
        catchup_window=timedelta(seconds=catchup),
    )


def new_schedule(schedule_id: str = "nightly", tenant: str = "", **kwargs: float) -> NewSchedule:
    return NewSchedule(
        schedule_id=schedule_id,
        definition=definition(**kwargs),  # type: ignore[arg-type]
        paused=False,
        requested_by=tenant or "tester",
        tenant=tenant,
    )


@pytest.fixture
def real_clock() -> FakeClock:
    return FakeClock(datetime.now(UTC))


Store = SqlJobStore | MemoryJobStore


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres), "memory"])
def store_url(request: pytest.FixtureRequest) -> str | None:
    """A fresh database's URL; None for the memory store. (A plain fixture: an async
    one cannot ask for the async clean_postgres_url.)"""
    if request.param == "memory":
        return None
    fixture = "sqlite_url" if request.param == "sqlite" else "clean_postgres_url"
    return str(request.getfixturevalue(fixture))


@pytest.fixture
async def stores(store_url: str | None, real_clock: FakeClock) -> AsyncIterator[list[Store]]:
    """Two stores on one fresh database, or on one MemoryTable: two instances."""
    opened: list[Store]
    if store_url is None:
        table = MemoryTable()
        opened = [MemoryJobStore(clock=real_clock, table=table) for _ in range(2)]
    else:
        opened = [SqlJobStore(store_url, instance_id=n, clock=real_clock) for n in ("a", "b")]
    yield opened
    for store in opened:
        await store.close()


async def move_back(store: Store, schedule_id: str, seconds: float) -> datetime:
    """Move the schedule's creation and next period `seconds` into the past (as if no
    instance had run meanwhile); returns the new next_fire_at."""
    (stored,) = await store.find_schedules(schedule_id, None)
    created = stored.created_at - timedelta(seconds=seconds)
    due = stored.next_fire_at - timedelta(seconds=seconds)
    if isinstance(store, MemoryJobStore):
        key = (stored.tenant, schedule_id)
        store.table.schedules[key] = replace(stored, created_at=created, next_fire_at=due)
        return due
    # Through the table's types: SQLite's times are text of one fixed format.
    async with store.engine.begin() as conn:
        await conn.execute(
            update(job_schedules)
            .where(job_schedules.c.schedule_id == schedule_id)
            .values(created_at=created, next_fire_at=due)
        )
    return due


async def job_count(store: Store) -> int:
    if isinstance(store, MemoryJobStore):
        return len(store.table.rows)
    async with store.engine.connect() as conn:
        return int((await conn.execute(text("SELECT count(*) FROM async_jobs"))).scalar_one())


def test_both_stores_are_schedule_stores() -> None:
    # Checked by mypy: each store is the port the servicer and the firing loop use.
    memory: ScheduleStore = MemoryJobStore()
    sql: ScheduleStore = SqlJobStore("sqlite+aiosqlite://")
    assert memory is not sql


async def test_create_get_list_delete_with_tenants(stores: list[Store]) -> None:
    store = stores[0]
    created, fresh = await store.create_schedule(new_schedule("nightly", tenant="alice"))
    assert fresh and created.next_fire_at > created.created_at
    assert created.next_fire_at - created.created_at <= timedelta(seconds=60)
    again, fresh_again = await store.create_schedule(new_schedule("nightly", tenant="alice"))
    assert not fresh_again and again == created
    with pytest.raises(ScheduleExistsError):
        await store.create_schedule(new_schedule("nightly", tenant="alice", interval=30))
    # Another tenant's id is its own.
    await store.create_schedule(new_schedule("nightly", tenant="bob", interval=30))
    await store.create_schedule(new_schedule("a-first", tenant="bob"))
    assert [s.tenant for s in await store.find_schedules("nightly", "alice")] == ["alice"]
    assert len(await store.find_schedules("nightly", None)) == 2
    page, after = await store.list_schedules(None, 2, None)
    assert [(s.schedule_id, s.tenant) for s in page] == [("a-first", "bob"), ("nightly", "alice")]
    assert after == ("nightly", "alice")
    rest, end = await store.list_schedules(None, 2, after)
    assert [(s.schedule_id, s.tenant) for s in rest] == [("nightly", "bob")] and end is None
    mine, _ = await store.list_schedules("bob", 10, None)
    assert [s.schedule_id for s in mine] == ["a-first", "nightly"]
    assert await store.delete_schedule("alice", "nightly")
    assert not await store.delete_schedule("alice", "nightly")
    assert await store.find_schedules("nightly", "alice") == []


async def test_pause_resume_counts_the_periods_passed(stores: list[Store]) -> None:
    store = stores[0]
    await store.create_schedule(new_schedule(interval=60))
    paused = await store.pause_schedule("", "nightly")
    assert paused is not None and paused.paused
    assert await store.next_schedule_fire_at() is None  # a paused one is never due
    # The next period was about 60 s ahead: now it started 270 s ago.
    due = await move_back(store, "nightly", 60 * 5 + 30)
    assert await store.fire_due_schedules() == []
    resumed = await store.resume_schedule("", "nightly")
    assert resumed is not None and not resumed.paused
    # Periods due, due+60 .. due+240 started while paused: skipped; the next is after now.
    assert resumed.skipped_count == 5
    assert resumed.next_fire_at == due + timedelta(seconds=300)
    assert resumed.next_fire_at > datetime.now(UTC)
    assert await store.pause_schedule("", "missing") is None
    assert await store.resume_schedule("", "missing") is None


async def test_two_instances_racing_for_a_period_make_one_job(
    stores: list[Store],
) -> None:
    a, b = stores
    await a.create_schedule(new_schedule(interval=60))
    due = await move_back(a, "nightly", 61)
    # Both instances see it due and fire at the same time, several times over.
    rounds = await asyncio.gather(*(s.fire_due_schedules() for s in (a, b, a, b)))
    outcomes = [o for r in rounds for o in r]
    assert len(outcomes) == 1
    (outcome,) = outcomes
    assert outcome.job is not None and outcome.period == due and outcome.skipped == 0
    assert outcome.job.request_id == period_request_id("nightly", due)
    assert outcome.job.requested_by == "tester" and outcome.job.status is JobStatus.PENDING
    assert await job_count(a) == 1
    (stored,) = await a.find_schedules("nightly", "")
    assert stored.last_job_id == outcome.job.id and stored.last_fire_at == due
    assert stored.next_fire_at == due + timedelta(seconds=60)


async def test_overlap_is_skipped_and_counted(stores: list[Store]) -> None:
    store = stores[0]
    await store.create_schedule(new_schedule(interval=60))
    await move_back(store, "nightly", 61)
    (first,) = await store.fire_due_schedules()
    assert first.job is not None
    await move_back(store, "nightly", 60)  # the next period is due; the first job PENDING
    (second,) = await store.fire_due_schedules()
    assert second.job is None and "still PENDING" in second.reason
    (stored,) = await store.find_schedules("nightly", "")
    assert stored.skipped_count == 1 and stored.last_job_id == first.job.id


async def test_catchup_window_fires_recent_periods_and_skips_older(
    stores: list[Store],
) -> None:
    store = stores[0]
    # Ten minutes of 60 s periods missed; the window covers the last 150 s of them.
    await store.create_schedule(new_schedule(interval=60, catchup=150))
    due = await move_back(store, "nightly", 600 + 10)
    now = datetime.now(UTC)
    (outcome,) = await store.fire_due_schedules()
    assert outcome.job is not None and outcome.period is not None
    # The oldest period within 150 s of now fires; the ones before are skipped.
    assert now - timedelta(seconds=150) <= outcome.period <= now - timedelta(seconds=89)
    skipped = (outcome.period - due) // timedelta(seconds=60)
    assert outcome.skipped == skipped >= 7
    (stored,) = await store.find_schedules("nightly", "")
    assert stored.skipped_count == skipped


async def test_zero_window_fires_only_the_latest_missed_period(
    stores: list[Store],
) -> None:
    store = stores[0]
    await store.create_schedule(new_schedule(interval=60))
    # The next period was about 60 s ahead: now it started 250 s ago.
    due = await move_back(store, "nightly", 300 + 10)
    (outcome,) = await store.fire_due_schedules()
    assert outcome.job is not None and outcome.period == due + timedelta(seconds=240)
    assert outcome.skipped == 4
    (stored,) = await store.find_schedules("nightly", "")
    assert stored.next_fire_at == due + timedelta(seconds=300)


async def test_with_a_window_a_missed_period_waits_for_the_previous_job(
    stores: list[Store],
) -> None:
    store = stores[0]
    await store.create_schedule(new_schedule(interval=60, catchup=600))
    # The next period was about 60 s ahead: now periods due, due+60 and due+120 have
    # started (130, 70 and 10 s ago).
    due = await move_back(store, "nightly", 190)
    (first,) = await store.fire_due_schedules()
    assert first.job is not None and first.period == due and first.skipped == 0
    # due+60 is due, and the first job is still PENDING: it waits (nothing counted).
    (waiting,) = await store.fire_due_schedules()
    assert waiting.waiting and waiting.job is None and "still PENDING" in waiting.reason
    (stored,) = await store.find_schedules("nightly", "")
    assert stored.next_fire_at == due + timedelta(seconds=60) and stored.skipped_count == 0
    await store.cancel(CancelParams(job_id=first.job.id, reason="done with it"))
    # The next round fires due+60; the one after, due+120 waits for that job in turn.
    fired = [o for _ in range(2) for o in await store.fire_due_schedules()]
    assert [(o.period, o.waiting) for o in fired] == [
        (due + timedelta(seconds=60), False),
        (due + timedelta(seconds=120), True),
    ]
    assert fired[0].job is not None
    assert fired[0].job.request_id == period_request_id("nightly", due + timedelta(seconds=60))
