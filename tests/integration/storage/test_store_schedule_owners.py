"""Schedules' quota and owner tokens (issue 42, point 6), on SQLite, PostgreSQL and
the memory store where they apply:

- a tenant's schedules are capped (create_schedule's max_per_tenant): a new one past
  the cap is refused with ScheduleQuotaError, a retry of a stored one is not, and
  racing creates of two instances never pass it (all three stores);
- a schedule fires only while the token that owns it is live: revoked or expired,
  its firing is held (it keeps its row, and reads say why); a token made again
  under the same name does not inherit it; ResumeSchedule takes it over, counting
  the periods passed meanwhile as skipped (SQL stores: the memory store has no
  api_tokens, so no schedule of it has an owner token).

Real time, as in test_store_schedules.py: a schedule is made due by moving its row
into the past."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, update

from san_jobs.job_service.domain.ports import (
    CreateScheduleParams,
    FindSchedulesParams,
    FireDueParams,
    ListSchedulesParams,
    ScheduleKey,
)
from san_jobs.job_service.domain.schedules import ScheduleQuotaError
from san_jobs.job_service.storage.api_tokens import SqlTokenStore
from san_jobs.job_service.storage.memory import MemoryJobStore, MemoryTable
from san_jobs.job_service.storage.repository import SqlJobStore
from san_jobs.job_service.storage.tables import api_tokens, job_schedules
from tests.integration.storage.test_store_schedules import job_count, new_schedule
from tests.support.clock import FakeClock

Store = SqlJobStore | MemoryJobStore


@pytest.fixture
def real_clock() -> FakeClock:
    return FakeClock(datetime.now(UTC))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres), "memory"])
def store_url(request: pytest.FixtureRequest) -> str | None:
    if request.param == "memory":
        return None
    fixture = "sqlite_url" if request.param == "sqlite" else "clean_postgres_url"
    return str(request.getfixturevalue(fixture))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def sql_url(request: pytest.FixtureRequest) -> str:
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


@pytest.fixture
async def sql_store(sql_url: str, real_clock: FakeClock) -> AsyncIterator[SqlJobStore]:
    store = SqlJobStore(sql_url, instance_id="a", clock=real_clock)
    yield store
    await store.close()


async def test_a_tenants_schedules_are_capped(stores: list[Store]) -> None:
    store = stores[0]
    for n in range(3):
        await store.schedules.create_schedule(
            CreateScheduleParams(new_schedule(f"s{n}", tenant="alice"), 3)
        )
    with pytest.raises(ScheduleQuotaError) as refused:
        await store.schedules.create_schedule(
            CreateScheduleParams(new_schedule("s3", tenant="alice"), 3)
        )
    assert refused.value.limit == 3 and "max-schedules-per-caller" in str(refused.value)
    # A retry of a stored one is that one, not a new schedule; another tenant has its own.
    _, created = await store.schedules.create_schedule(
        CreateScheduleParams(new_schedule("s1", tenant="alice"), 3)
    )
    assert not created
    await store.schedules.create_schedule(CreateScheduleParams(new_schedule("s0", tenant="bob"), 3))
    # Deleting one makes room; no cap: as before.
    assert await store.schedules.delete_schedule(ScheduleKey("alice", "s0"))
    await store.schedules.create_schedule(
        CreateScheduleParams(new_schedule("s3", tenant="alice"), 3)
    )
    await store.schedules.create_schedule(CreateScheduleParams(new_schedule("s4", tenant="alice")))
    mine, _ = await store.schedules.list_schedules(ListSchedulesParams("alice", 10, None))
    assert [s.schedule_id for s in mine] == ["s1", "s2", "s3", "s4"]


async def test_racing_creates_of_two_instances_do_not_pass_the_cap(stores: list[Store]) -> None:
    a, b = stores

    async def create(store: Store, n: int) -> bool:
        try:
            await store.schedules.create_schedule(
                CreateScheduleParams(new_schedule(f"r{n}", tenant="mallory"), 4)
            )
        except ScheduleQuotaError:
            return False
        return True

    made = await asyncio.gather(*(create(a if n % 2 else b, n) for n in range(12)))
    assert sum(made) == 4
    assert (
        len((await a.schedules.list_schedules(ListSchedulesParams("mallory", 100, None)))[0]) == 4
    )


async def add_token(store: SqlJobStore, name: str, **kwargs: datetime) -> str:
    """A live token named `name` (as `tokens create`); its api_tokens.id."""
    await SqlTokenStore(store.engine).add(name, "submitter", uuid.uuid4().hex, **kwargs)
    query = select(api_tokens.c.id).where(
        api_tokens.c.name == name, api_tokens.c.revoked_at.is_(None)
    )
    async with store.engine.connect() as conn:
        return str((await conn.execute(query)).scalar_one())


async def move_back(store: SqlJobStore, schedule_id: str, seconds: float) -> None:
    """Every tenant's schedule of this id, its creation and next period `seconds`
    into the past (as if no instance had run meanwhile)."""
    for stored in await store.schedules.find_schedules(FindSchedulesParams(schedule_id, None)):
        async with store.engine.begin() as conn:
            await conn.execute(
                update(job_schedules)
                .where(
                    job_schedules.c.tenant == stored.tenant,
                    job_schedules.c.schedule_id == schedule_id,
                )
                .values(
                    created_at=stored.created_at - timedelta(seconds=seconds),
                    next_fire_at=stored.next_fire_at - timedelta(seconds=seconds),
                )
            )


async def fired_tenants(store: SqlJobStore) -> list[str]:
    """The tenants whose due schedule a firing round took (fired, or skipped as an
    overlap with the previous period's job)."""
    return sorted(
        o.schedule.tenant for o in await store.schedules.fire_due_schedules(FireDueParams())
    )


async def test_a_revoked_owners_schedules_are_held_and_a_new_token_does_not_inherit_them(
    sql_store: SqlJobStore,
) -> None:
    store = sql_store
    alice_token = await add_token(store, "alice")
    await add_token(store, "bob")
    created, _ = await store.schedules.create_schedule(
        CreateScheduleParams(new_schedule("nightly", tenant="alice"))
    )
    assert created.owner_token_id == alice_token and not created.held
    await store.schedules.create_schedule(
        CreateScheduleParams(new_schedule("nightly", tenant="bob"))
    )
    # No token was ever named "cert-caller" (a client certificate's name): no owner token.
    free, _ = await store.schedules.create_schedule(
        CreateScheduleParams(new_schedule("nightly", tenant="cert-caller"))
    )
    assert free.owner_token_id is None

    assert await SqlTokenStore(store.engine).revoke("alice")
    await move_back(store, "nightly", 61)  # all three are due
    assert await fired_tenants(store) == ["bob", "cert-caller"]
    (held,) = await store.schedules.find_schedules(FindSchedulesParams("nightly", "alice"))
    assert held.held and not held.paused and "'alice' was revoked at" in held.owner_hold
    assert held.last_job_id is None and await job_count(store) == 2
    # Nothing of alice's is due for the firing loop either (bob's next period is ahead).
    upcoming = await store.schedules.next_schedule_fire_at()
    assert upcoming is not None and upcoming > datetime.now(UTC)

    # The name is given a new token: it is another token, the schedule stays held.
    new_token = await add_token(store, "alice")
    assert new_token and new_token != alice_token
    await move_back(store, "nightly", 60)
    assert await fired_tenants(store) == ["bob", "cert-caller"]
    (still,) = await store.schedules.find_schedules(FindSchedulesParams("nightly", "alice"))
    assert still.held and still.owner_token_id == alice_token
    page, _ = await store.schedules.list_schedules(ListSchedulesParams(None, 10, None))
    assert [s.tenant for s in page if s.held] == ["alice"]

    # ResumeSchedule takes it over on purpose: the new token owns it, the periods
    # passed while held (two, moved back 121 s) are skipped, the next one fires.
    resumed = await store.schedules.resume_schedule(ScheduleKey("alice", "nightly"))
    assert resumed is not None and not resumed.held and resumed.owner_token_id == new_token
    assert resumed.skipped_count == 2 and resumed.next_fire_at > datetime.now(UTC)
    await move_back(store, "nightly", 61)
    assert "alice" in await fired_tenants(store)


async def test_an_expired_owners_schedules_are_held(sql_store: SqlJobStore) -> None:
    store = sql_store
    await add_token(store, "carol", expires_at=datetime.now(UTC) + timedelta(hours=1))
    await store.schedules.create_schedule(
        CreateScheduleParams(new_schedule("hourly", tenant="carol"))
    )
    await move_back(store, "hourly", 61)
    async with store.engine.begin() as conn:
        await conn.execute(
            update(api_tokens)
            .where(api_tokens.c.name == "carol")
            .values(expires_at=datetime.now(UTC) - timedelta(seconds=5))
        )
    assert await store.schedules.fire_due_schedules(FireDueParams()) == []
    (held,) = await store.schedules.find_schedules(FindSchedulesParams("hourly", "carol"))
    assert held.held and "'carol' expired at" in held.owner_hold
    assert await job_count(store) == 0
    # Resumed with no live token of the name: still held, nothing fires.
    resumed = await store.schedules.resume_schedule(ScheduleKey("carol", "hourly"))
    assert resumed is not None and resumed.held
    assert await store.schedules.fire_due_schedules(FireDueParams()) == []


async def test_a_schedule_created_with_a_just_revoked_token_does_not_fire(
    sql_store: SqlJobStore,
) -> None:
    # The verifier trusts a verdict for 2 s: a call made with a token revoked within
    # them creates a schedule owned by that (revoked) token, not by no one.
    store = sql_store
    token = await add_token(store, "dave")
    await SqlTokenStore(store.engine).revoke("dave")
    created, _ = await store.schedules.create_schedule(
        CreateScheduleParams(new_schedule("late", tenant="dave"))
    )
    assert created.owner_token_id == token and created.held
    await move_back(store, "late", 61)
    assert await store.schedules.fire_due_schedules(FireDueParams()) == []
