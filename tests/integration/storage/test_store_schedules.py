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
from san_jobs.job_service.domain.ports import (
    CancelParams,
    CreateScheduleParams,
    FindSchedulesParams,
    FireDueParams,
    ListSchedulesParams,
    ScheduleKey,
    ScheduleStore,
)
from san_jobs.job_service.domain.schedules import (
    PER_OWNER_IN_ROUND,
    WAITING_RECHECK,
    FireOutcome,
    NewSchedule,
    Schedule,
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
    (stored,) = await store.schedules.find_schedules(FindSchedulesParams(schedule_id, None))
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
    created, fresh = await store.schedules.create_schedule(
        CreateScheduleParams(new_schedule("nightly", tenant="alice"))
    )
    assert fresh and created.next_fire_at > created.created_at
    assert created.next_fire_at - created.created_at <= timedelta(seconds=60)
    again, fresh_again = await store.schedules.create_schedule(
        CreateScheduleParams(new_schedule("nightly", tenant="alice"))
    )
    assert not fresh_again and again == created
    with pytest.raises(ScheduleExistsError):
        await store.schedules.create_schedule(
            CreateScheduleParams(new_schedule("nightly", tenant="alice", interval=30))
        )
    # Another tenant's id is its own.
    await store.schedules.create_schedule(
        CreateScheduleParams(new_schedule("nightly", tenant="bob", interval=30))
    )
    await store.schedules.create_schedule(
        CreateScheduleParams(new_schedule("a-first", tenant="bob"))
    )
    assert [
        s.tenant
        for s in await store.schedules.find_schedules(FindSchedulesParams("nightly", "alice"))
    ] == ["alice"]
    assert len(await store.schedules.find_schedules(FindSchedulesParams("nightly", None))) == 2
    page, after = await store.schedules.list_schedules(ListSchedulesParams(None, 2, None))
    assert [(s.schedule_id, s.tenant) for s in page] == [("a-first", "bob"), ("nightly", "alice")]
    assert after == ("nightly", "alice")
    rest, end = await store.schedules.list_schedules(ListSchedulesParams(None, 2, after))
    assert [(s.schedule_id, s.tenant) for s in rest] == [("nightly", "bob")] and end is None
    mine, _ = await store.schedules.list_schedules(ListSchedulesParams("bob", 10, None))
    assert [s.schedule_id for s in mine] == ["a-first", "nightly"]
    assert await store.schedules.delete_schedule(ScheduleKey("alice", "nightly"))
    assert not await store.schedules.delete_schedule(ScheduleKey("alice", "nightly"))
    assert await store.schedules.find_schedules(FindSchedulesParams("nightly", "alice")) == []


async def test_pause_resume_counts_the_periods_passed(stores: list[Store]) -> None:
    store = stores[0]
    await store.schedules.create_schedule(CreateScheduleParams(new_schedule(interval=60)))
    paused = await store.schedules.pause_schedule(ScheduleKey("", "nightly"))
    assert paused is not None and paused.paused
    assert await store.schedules.next_schedule_fire_at() is None  # a paused one is never due
    # The next period was about 60 s ahead: now it started 270 s ago.
    due = await move_back(store, "nightly", 60 * 5 + 30)
    assert await store.schedules.fire_due_schedules(FireDueParams()) == []
    resumed = await store.schedules.resume_schedule(ScheduleKey("", "nightly"))
    assert resumed is not None and not resumed.paused
    # Periods due, due+60 .. due+240 started while paused: skipped; the next is after now.
    assert resumed.skipped_count == 5
    assert resumed.next_fire_at == due + timedelta(seconds=300)
    assert resumed.next_fire_at > datetime.now(UTC)
    assert await store.schedules.pause_schedule(ScheduleKey("", "missing")) is None
    assert await store.schedules.resume_schedule(ScheduleKey("", "missing")) is None


async def test_two_instances_racing_for_a_period_make_one_job(
    stores: list[Store],
) -> None:
    a, b = stores
    await a.schedules.create_schedule(CreateScheduleParams(new_schedule(interval=60)))
    due = await move_back(a, "nightly", 61)
    # Both instances see it due and fire at the same time, several times over.
    rounds = await asyncio.gather(
        *(s.schedules.fire_due_schedules(FireDueParams()) for s in (a, b, a, b))
    )
    outcomes = [o for r in rounds for o in r]
    assert len(outcomes) == 1
    (outcome,) = outcomes
    assert outcome.job is not None and outcome.period == due and outcome.skipped == 0
    assert outcome.job.request_id == period_request_id("nightly", due)
    assert outcome.job.requested_by == "tester" and outcome.job.status is JobStatus.PENDING
    assert await job_count(a) == 1
    (stored,) = await a.schedules.find_schedules(FindSchedulesParams("nightly", ""))
    assert stored.last_job_id == outcome.job.id and stored.last_fire_at == due
    assert stored.next_fire_at == due + timedelta(seconds=60)


async def test_instances_racing_for_a_catch_up_round_count_its_skips_once(
    stores: list[Store],
) -> None:
    # Issue 42, point 14: the claim's `next_fire_at = <the value read>` condition.
    # Ten minutes of 60 s periods missed, a window of 150 s: one round skips the
    # periods older than the window and fires the oldest within it. An instance
    # that read the schedule before another's round committed must claim nothing:
    # without the condition it claimed the same round again (no second job, the
    # request id stops that) and counted its skipped periods twice or more.
    a, b = stores
    await a.schedules.create_schedule(CreateScheduleParams(new_schedule(interval=60, catchup=150)))
    due = await move_back(a, "nightly", 600 + 10)
    rounds = await asyncio.gather(
        *(s.schedules.fire_due_schedules(FireDueParams()) for s in (a, b) * 4)
    )
    outcomes = [o for r in rounds for o in r]
    assert len(outcomes) == 1, outcomes
    (outcome,) = outcomes
    assert outcome.job is not None and outcome.period is not None
    skipped = (outcome.period - due) // timedelta(seconds=60)
    assert outcome.skipped == skipped >= 7
    (stored,) = await a.schedules.find_schedules(FindSchedulesParams("nightly", ""))
    assert stored.skipped_count == skipped and stored.last_job_id == outcome.job.id
    assert stored.next_fire_at == outcome.period + timedelta(seconds=60)
    assert await job_count(a) == 1


async def test_overlap_is_skipped_and_counted(stores: list[Store]) -> None:
    store = stores[0]
    await store.schedules.create_schedule(CreateScheduleParams(new_schedule(interval=60)))
    await move_back(store, "nightly", 61)
    (first,) = await store.schedules.fire_due_schedules(FireDueParams())
    assert first.job is not None
    await move_back(store, "nightly", 60)  # the next period is due; the first job PENDING
    (second,) = await store.schedules.fire_due_schedules(FireDueParams())
    assert second.job is None and "still PENDING" in second.reason
    (stored,) = await store.schedules.find_schedules(FindSchedulesParams("nightly", ""))
    assert stored.skipped_count == 1 and stored.last_job_id == first.job.id


async def test_catchup_window_fires_recent_periods_and_skips_older(
    stores: list[Store],
) -> None:
    store = stores[0]
    # Ten minutes of 60 s periods missed; the window covers the last 150 s of them.
    await store.schedules.create_schedule(
        CreateScheduleParams(new_schedule(interval=60, catchup=150))
    )
    due = await move_back(store, "nightly", 600 + 10)
    now = datetime.now(UTC)
    (outcome,) = await store.schedules.fire_due_schedules(FireDueParams())
    assert outcome.job is not None and outcome.period is not None
    # The oldest period within 150 s of now fires; the ones before are skipped.
    assert now - timedelta(seconds=150) <= outcome.period <= now - timedelta(seconds=89)
    skipped = (outcome.period - due) // timedelta(seconds=60)
    assert outcome.skipped == skipped >= 7
    (stored,) = await store.schedules.find_schedules(FindSchedulesParams("nightly", ""))
    assert stored.skipped_count == skipped


async def test_zero_window_fires_only_the_latest_missed_period(
    stores: list[Store],
) -> None:
    store = stores[0]
    await store.schedules.create_schedule(CreateScheduleParams(new_schedule(interval=60)))
    # The next period was about 60 s ahead: now it started 250 s ago.
    due = await move_back(store, "nightly", 300 + 10)
    (outcome,) = await store.schedules.fire_due_schedules(FireDueParams())
    assert outcome.job is not None and outcome.period == due + timedelta(seconds=240)
    assert outcome.skipped == 4
    (stored,) = await store.schedules.find_schedules(FindSchedulesParams("nightly", ""))
    assert stored.next_fire_at == due + timedelta(seconds=300)


async def test_with_a_window_a_missed_period_waits_for_the_previous_job(
    stores: list[Store],
) -> None:
    store = stores[0]
    await store.schedules.create_schedule(
        CreateScheduleParams(new_schedule(interval=60, catchup=600))
    )
    # The next period was about 60 s ahead: now periods due, due+60 and due+120 have
    # started (130, 70 and 10 s ago).
    due = await move_back(store, "nightly", 190)
    (first,) = await store.schedules.fire_due_schedules(FireDueParams())
    assert first.job is not None and first.period == due and first.skipped == 0
    # due+60 is due, and the first job is still PENDING: it waits, which is not due
    # (issue 42: no round takes it, nothing counted, the loop does not wake for it).
    assert await store.schedules.fire_due_schedules(FireDueParams()) == []
    assert await store.schedules.next_schedule_fire_at() is None
    (stored,) = await store.schedules.find_schedules(FindSchedulesParams("nightly", ""))
    assert stored.next_fire_at == due + timedelta(seconds=60) and stored.skipped_count == 0
    await store.commands.cancel(CancelParams(job_id=first.job.id, reason="done with it"))
    assert await store.schedules.next_schedule_fire_at() == due + timedelta(seconds=60)
    # The next round fires due+60; due+120 then waits for that job in turn.
    fired = [o for _ in range(2) for o in await store.schedules.fire_due_schedules(FireDueParams())]
    assert [(o.period, o.waiting) for o in fired] == [(due + timedelta(seconds=60), False)]
    assert fired[0].job is not None
    assert fired[0].job.request_id == period_request_id("nightly", due + timedelta(seconds=60))
    # Looked at again after WAITING_RECHECK: the round waits (once), and is not due again.
    await shift(store, "", WAITING_RECHECK.total_seconds() + 1, updated_only=True)
    (looked,) = await store.schedules.fire_due_schedules(FireDueParams())
    assert looked.waiting and looked.job is None and "still PENDING" in looked.reason
    assert looked.period == due + timedelta(seconds=120)
    assert await store.schedules.fire_due_schedules(FireDueParams()) == []


async def shift(store: Store, tenant: str, seconds: float, *, updated_only: bool = False) -> None:
    """Move every schedule of `tenant` `seconds` into the past: its creation and next
    period (as move_back), or with `updated_only` its last round's time only."""
    back = timedelta(seconds=seconds)
    found, _ = await store.schedules.list_schedules(ListSchedulesParams(tenant, 1000, None))

    def moved(s: Schedule) -> dict[str, datetime]:
        if updated_only:
            return {"updated_at": s.updated_at - back}
        return {"created_at": s.created_at - back, "next_fire_at": s.next_fire_at - back}

    if isinstance(store, MemoryJobStore):
        for s in found:
            store.table.schedules[tenant, s.schedule_id] = replace(s, **moved(s))
        return
    async with store.engine.begin() as conn:
        for s in found:
            await conn.execute(
                update(job_schedules)
                .where(job_schedules.c.tenant == tenant)
                .where(job_schedules.c.schedule_id == s.schedule_id)
                .values(**moved(s))
            )


async def fire_all(store: Store) -> list[FireOutcome]:
    """Rounds until none fires (as the firing loop: again at once while one fires)."""
    outcomes: list[FireOutcome] = []
    while (fired := await store.schedules.fire_due_schedules(FireDueParams())) and not all(
        o.waiting for o in fired
    ):
        outcomes += fired
    return outcomes


async def test_waiting_schedules_of_one_tenant_do_not_stop_anothers(
    stores: list[Store], real_clock: FakeClock
) -> None:
    # Issue 42: mallory's 100 schedules with a day of catch-up each wait for a job
    # that stays PENDING (hers were delayed 300 days); every round took the same 100
    # rows (limit 100, oldest first), and victor's 1 s schedule never fired.
    store = stores[0]
    real_clock.now = datetime.now(UTC)  # SQLite's and memory's clock (PostgreSQL's is its own)
    for n in range(100):
        await store.schedules.create_schedule(
            CreateScheduleParams(
                new_schedule(f"m-{n:03}", tenant="mallory", catchup=86400, target=f"m-{n}")
            )
        )
    await shift(store, "mallory", 600 + 61)  # each first period started 601 s ago
    first = await fire_all(store)
    assert len(first) == 100 and all(o.job is not None for o in first)
    # Each next period has started, its previous job is still PENDING: all wait.
    # (A catch-up window: a period missed on a slow test machine still fires, later.)
    real_clock.now = datetime.now(UTC)
    await store.schedules.create_schedule(
        CreateScheduleParams(new_schedule("v", tenant="victor", interval=1, catchup=60, target="v"))
    )
    await shift(store, "victor", 1)
    periods: list[datetime | None] = []
    for _ in range(3):  # the first period (moved back), then two in real time
        (victor,) = await store.schedules.find_schedules(FindSchedulesParams("v", "victor"))
        await asyncio.sleep(max(0.0, (victor.next_fire_at - datetime.now(UTC)).total_seconds()))
        real_clock.now = datetime.now(UTC)
        outcomes = await store.schedules.fire_due_schedules(
            FireDueParams()
        )  # as the loop calls it: limit 100
        assert [(o.schedule.tenant, o.waiting) for o in outcomes] == [("victor", False)]
        fired = outcomes[0].job
        assert fired is not None and not outcomes[0].deduplicated
        periods.append(outcomes[0].period)
        await store.commands.cancel(CancelParams(job_id=fired.id, reason="victor's worker ran it"))
        # The loop sleeps until victor's next period: mallory's are not due.
        (victor,) = await store.schedules.find_schedules(FindSchedulesParams("v", "victor"))
        assert await store.schedules.next_schedule_fire_at() == victor.next_fire_at
    (victor,) = await store.schedules.find_schedules(FindSchedulesParams("v", "victor"))
    assert victor.skipped_count == 0 and periods[0] is not None
    assert periods == [periods[0] + timedelta(seconds=k) for k in range(3)]
    # One of mallory's jobs ends: that schedule's waiting period fires (the oldest
    # within its window), no other of hers.
    (m0,) = await store.schedules.find_schedules(FindSchedulesParams("m-000", "mallory"))
    assert m0.last_job_id is not None
    await store.commands.cancel(CancelParams(job_id=m0.last_job_id, reason="ended"))
    outcomes = await store.schedules.fire_due_schedules(
        FireDueParams()
    )  # (victor's too, if he is catching up)
    (resumed,) = [o for o in outcomes if o.schedule.tenant == "mallory"]
    assert resumed.schedule.schedule_id == "m-000" and resumed.job is not None
    assert resumed.period == m0.next_fire_at


async def test_one_owner_cannot_fill_a_firing_round(stores: list[Store]) -> None:
    # Issue 42: a round is shared between owners. mallory's 30 due schedules are
    # older than victor's one; a round of 20 still fires victor's, and at most
    # PER_OWNER_IN_ROUND of hers.
    store = stores[0]
    for n in range(30):
        await store.schedules.create_schedule(
            CreateScheduleParams(new_schedule(f"m-{n:02}", tenant="mallory", target=f"m-{n}"))
        )
    await store.schedules.create_schedule(
        CreateScheduleParams(new_schedule("v", tenant="victor", target="v"))
    )
    await shift(store, "mallory", 120)
    await shift(store, "victor", 61)
    outcomes = await store.schedules.fire_due_schedules(FireDueParams(limit=20))
    owners = [o.schedule.tenant for o in outcomes]
    assert owners.count("victor") == 1 and owners.count("mallory") == PER_OWNER_IN_ROUND
    assert all(o.job is not None for o in outcomes)
    # The rest of hers in the next rounds (the loop goes on while a round fires).
    assert len(await fire_all(store)) == 30 - PER_OWNER_IN_ROUND
