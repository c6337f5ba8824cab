"""Several instances of one inbox consumer on one database (SQLite file, PostgreSQL),
each with its own engine as separate processes would have: one consumes at a time,
another takes over within about the lease when it dies, at once when it stops, and an
instance whose lease ran out applies nothing."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from test_inbox_support import (
    ChangeFeed,
    Effects,
    app_database,
    applied,
    cursor_of,
    serving,
    wait_for,
)

from san_jobs.client import AsyncJobsClient
from san_jobs.client.inbox import Inbox
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

LEASE = 0.8


@dataclass
class Instance:
    inbox: Inbox
    effects: Effects
    engine: AsyncEngine


@dataclass
class Shared:
    feed: ChangeFeed
    client: AsyncJobsClient
    url: str
    instances: list[Instance] = field(default_factory=list)

    def instance(self) -> Instance:
        engine = create_async_engine(self.url)
        effects = Effects()
        inbox = Inbox(engine, self.client, "cards", effects, lease=LEASE, max_backoff=0.5)
        made = Instance(inbox, effects, engine)
        self.instances.append(made)
        return made


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def shared(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Shared]:
    async with app_database(request.param, tmp_path) as url, serving() as (feed, client):
        made = Shared(feed, client, url)
        try:
            yield made
        finally:
            for each in made.instances:
                await each.inbox.stop()
                await each.engine.dispose()


def holds(instance: Instance) -> object:
    async def check() -> bool:
        return instance.inbox.health().holds_lease and instance.inbox.health().state == "consuming"

    return check


def count_is(engine: AsyncEngine, count: int) -> object:
    async def check() -> bool:
        return len(await applied(engine)) >= count

    return check


async def kill(instance: Instance) -> None:
    """The process dies: its task ends, its lease stays until it runs out."""
    task = instance.inbox._task
    assert task is not None
    task.cancel()
    await asyncio.wait([task])


async def test_one_consumes_and_another_takes_over_when_it_dies(shared: Shared) -> None:
    a, b = shared.instance(), shared.instance()
    await a.inbox.start()
    await wait_for(holds(a))
    await b.inbox.start()
    first = shared.feed.add_jobs(3)
    await wait_for(count_is(a.engine, 3))
    await asyncio.sleep(LEASE)  # b tried for the lease a few times meanwhile
    assert b.inbox.health().state == "standby" and not b.inbox.health().holds_lease
    assert a.effects.calls == first and b.effects.calls == []

    await kill(a)
    died = time.monotonic()
    later = shared.feed.add_jobs(3)
    await wait_for(count_is(a.engine, 6))
    took = time.monotonic() - died
    assert took < LEASE + 1.5, took  # the lease's end plus one standby poll, about
    assert b.effects.calls == later
    assert await applied(a.engine) == first + later  # each once
    assert await b.inbox.stored_cursor() == cursor_of(6)


async def test_a_stopped_instance_hands_over_at_once(shared: Shared) -> None:
    a, b = shared.instance(), shared.instance()
    await a.inbox.start()
    await wait_for(holds(a))
    await b.inbox.start()
    await asyncio.sleep(0.3)
    await a.inbox.stop()
    stopped = time.monotonic()
    ids = shared.feed.add_jobs(2)
    await wait_for(count_is(a.engine, 2))
    assert time.monotonic() - stopped < LEASE  # not waiting for the lease to run out
    assert b.effects.calls == ids and a.effects.calls == []


async def test_an_instance_whose_lease_ran_out_applies_nothing(
    shared: Shared, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="san_jobs.client.inbox")
    a, b = shared.instance(), shared.instance()

    async def stalled() -> None:  # a stops renewing (a long GC pause, a frozen VM)
        await asyncio.Event().wait()

    a.inbox._keep_lease = stalled  # type: ignore[method-assign]
    await a.inbox.start()
    await wait_for(holds(a))
    await b.inbox.start()
    await wait_for(holds(b))  # a's lease ran out: b took it; a's stream is still open
    await kill(b)  # b dies holding the lease: now nobody may apply until it runs out
    died = time.monotonic()
    (job_id,) = shared.feed.add_jobs(1)
    await wait_for(count_is(a.engine, 1))
    # a saw the change on its old stream at once, but its fenced UPDATE found b's
    # lease: it applied nothing until b's lease had run out and it took it again.
    assert time.monotonic() - died >= LEASE * 0.9
    assert any("no longer holds the lease" in r.getMessage() for r in caplog.records)
    assert a.effects.calls == [job_id]  # called once, after taking the lease
    assert await applied(a.engine) == [job_id]


async def test_a_change_in_flight_keeps_the_consumer_until_it_commits(shared: Shared) -> None:
    a, b = shared.instance(), shared.instance()
    release = asyncio.Event()
    inside = asyncio.Event()

    async def slow(job: pb.Job) -> None:  # runs past the lease, holding the row
        inside.set()
        await release.wait()

    a.effects.after = slow
    await a.inbox.start()
    await wait_for(holds(a))
    (job_id,) = shared.feed.add_jobs(1)
    await asyncio.wait_for(inside.wait(), 10)
    await b.inbox.start()
    await asyncio.sleep(LEASE * 2)  # a's lease time has passed, its transaction is open
    release.set()
    await wait_for(count_is(a.engine, 1))
    second = shared.feed.add_jobs(1)
    await wait_for(count_is(a.engine, 2))
    assert b.effects.calls == []  # b never took over: a was alive all along
    assert a.effects.calls == [job_id, *second]
    assert await applied(a.engine) == [job_id, *second]
