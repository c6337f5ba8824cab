"""The SDK's transactional inbox (issue 24, part 2) on SQLite and PostgreSQL, fed by an
in-process JobService serving StreamJobChanges from a list: each change applied once
whatever the point of a crash, progress marks, retries then parking then replay, and
CURSOR_EXPIRED halting the consumer instead of skipping."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
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

LEASE = 0.6  # short, so that a crashed instance's lease ends quickly


@dataclass
class World:
    feed: ChangeFeed
    client: AsyncJobsClient
    engine: AsyncEngine
    effects: Effects

    def inbox(self, **options: object) -> Inbox:
        settings: dict[str, object] = {"lease": LEASE, "max_backoff": 0.5, **options}
        return Inbox(self.engine, self.client, "cards", self.effects, **settings)  # type: ignore[arg-type]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def world(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[World]:
    async with app_database(request.param, tmp_path) as url, serving() as (feed, client):
        engine = create_async_engine(url)
        try:
            yield World(feed, client, engine, Effects())
        finally:
            await engine.dispose()


class Crash(BaseException):
    """The process dying at this point: nothing below catches it."""


def applied_all(world: World, ids: list[str]) -> object:
    async def check() -> bool:
        return len(await applied(world.engine)) >= len(ids)

    return check


@pytest.mark.parametrize("point", ["before_handler", "inside_handler", "after_commit", "cancelled"])
async def test_a_crash_at_any_point_applies_each_change_once(world: World, point: str) -> None:
    ids = world.feed.add_jobs(5)
    victim = ids[2]
    crashed = asyncio.Event()
    first = world.inbox()

    async def crash_before(job: pb.Job) -> None:
        if job.id == victim and not crashed.is_set():
            crashed.set()
            raise Crash

    async def crash_inside(job: pb.Job) -> None:  # its row is written, not committed
        if job.id == victim and not crashed.is_set():
            crashed.set()
            if point == "cancelled":
                await asyncio.Event().wait()  # stop() cancels it here
            raise Crash

    if point == "before_handler":
        world.effects.before = crash_before
    elif point in ("inside_handler", "cancelled"):
        world.effects.after = crash_inside
    else:
        committed = first._committed

        def crash_after_commit(cursor: str, job: pb.Job | None) -> None:
            committed(cursor, job)
            if job is not None and job.id == victim:
                crashed.set()
                raise Crash

        first._committed = crash_after_commit  # type: ignore[method-assign]

    await first.start()
    await asyncio.wait_for(crashed.wait(), 10)
    if point == "cancelled":
        await first.stop()
    else:
        assert first._task is not None
        await asyncio.wait([first._task])  # died, its lease still held until it ends
        assert isinstance(first._task.exception(), Crash)
    assert await first.stored_cursor() == cursor_of(3 if point == "after_commit" else 2)

    second = world.inbox()
    await second.start()
    try:
        await wait_for(applied_all(world, ids))
        await asyncio.sleep(0.2)  # a repeat would land now
        assert await applied(world.engine) == ids  # each once, in order
        # The new instance resumed right after what the first one committed.
        assert world.feed.requests[-1].after_cursor == cursor_of(
            3 if point == "after_commit" else 2
        )
        assert await second.stored_cursor() == cursor_of(5)
    finally:
        await second.stop()
        await first.stop()


async def test_progress_marks_store_their_cursor_and_call_no_handler(world: World) -> None:
    world.feed.add(None)
    (job_id,) = world.feed.add_jobs(1)
    world.feed.add(None)
    world.feed.add(None)
    inbox = world.inbox()
    await inbox.start()
    try:

        async def at_the_last_mark() -> bool:
            return await inbox.stored_cursor() == cursor_of(4)

        await wait_for(at_the_last_mark)
        assert world.effects.calls == [job_id]
        assert await applied(world.engine) == [job_id]
        assert inbox.health().cursor == cursor_of(4)
    finally:
        await inbox.stop()
    again = world.inbox()
    await again.start()
    try:
        await wait_for(lambda: _opened(world.feed, 2))
        assert world.feed.requests[-1].after_cursor == cursor_of(4)
    finally:
        await again.stop()


async def _opened(feed: ChangeFeed, count: int) -> bool:
    return len(feed.requests) >= count


async def test_filters_are_sent_with_the_stored_cursor(world: World) -> None:
    inbox = world.inbox(
        job_types=[pb.JOB_TYPE_CARD_ANALYSIS],
        statuses=[pb.JOB_STATUS_COMPLETED, pb.JOB_STATUS_FAILED],
    )
    await inbox.reset(cursor_of(0))
    await inbox.start()
    try:
        await wait_for(lambda: _opened(world.feed, 1))
        request = world.feed.requests[0]
        assert request.after_cursor == cursor_of(0)
        assert list(request.job_types) == [pb.JOB_TYPE_CARD_ANALYSIS]
        assert list(request.statuses) == [pb.JOB_STATUS_COMPLETED, pb.JOB_STATUS_FAILED]
    finally:
        await inbox.stop()


async def test_a_failing_handler_is_retried_with_backoff_then_parked_and_replayed(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="san_jobs.client.inbox")
    a, broken, c, flaky = world.feed.add_jobs(4)
    times: dict[str, list[float]] = {}
    fixed = False

    async def fail_some(job: pb.Job) -> None:
        times.setdefault(job.id, []).append(time.monotonic())
        if job.id == broken and not fixed:
            raise ValueError("no such scrap table")
        if job.id == flaky and len(times[job.id]) <= 2:
            raise ConnectionError("upstream hiccup")

    world.effects.after = fail_some
    inbox = world.inbox(max_failures=3)
    await inbox.start()
    try:
        await wait_for(applied_all(world, [a, c, flaky]))
        assert await applied(world.engine) == [a, c, flaky]  # the feed went on past `broken`
        assert len(times[broken]) == 3 and len(times[flaky]) == 3
        # Backoff with jitter: the n-th retry waits in [d/2, d], d = 0.05 * 2^(n-1).
        gaps = [later - earlier for earlier, later in itertools.pairwise(times[flaky])]
        assert gaps[0] >= 0.024 and gaps[1] >= 0.049, gaps
        assert any(f"job_id={flaky}" in r.getMessage() for r in caplog.records)
        parked_lines = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert any(f"job_id={broken}" in r.getMessage() for r in parked_lines)

        (parked,) = await inbox.parked()
        assert parked.job_id == broken and parked.job.id == broken
        assert parked.job.status == pb.JOB_STATUS_COMPLETED
        assert parked.cursor == cursor_of(2) and parked.failures == 3
        assert "ValueError: no such scrap table" in parked.error
        assert await inbox.stored_cursor() == cursor_of(4)

        (still,) = await inbox.replay_parked()  # fails again: stays, counted
        assert still.id == parked.id and still.failures == 4
        assert await applied(world.engine) == [a, c, flaky]

        fixed = True
        assert await inbox.replay_parked() == []
        assert await inbox.parked() == []
        assert await applied(world.engine) == [a, c, flaky, broken]
        assert await inbox.replay_parked() == []  # nothing left: applied once
        assert await applied(world.engine) == [a, c, flaky, broken]
    finally:
        await inbox.stop()


async def test_a_handler_over_its_timeout_counts_as_a_failure(world: World) -> None:
    (slow,) = world.feed.add_jobs(1)
    blocked = 0

    async def hang_once(job: pb.Job) -> None:
        nonlocal blocked
        blocked += 1
        if blocked == 1:
            await asyncio.sleep(30)

    world.effects.after = hang_once
    inbox = world.inbox(handler_timeout=0.3)
    await inbox.start()
    try:
        await wait_for(applied_all(world, [slow]))
        assert await applied(world.engine) == [slow]
        assert blocked == 2
    finally:
        await inbox.stop()


async def test_cursor_expired_halts_without_skipping_until_reset(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="san_jobs.client.inbox")
    ids = world.feed.add_jobs(6)
    world.feed.oldest_kept = 5  # changes 1-4 pruned; the consumer is at 2
    inbox = world.inbox()
    await inbox.reset(cursor_of(2))
    await inbox.start()
    try:
        await wait_for(_state_is(inbox, "halted"))
        health = inbox.health()
        assert not health.ok and health.oldest_cursor == cursor_of(5)
        assert "CURSOR_EXPIRED" in (health.last_error or "")
        assert any(cursor_of(5) in r.getMessage() for r in caplog.records)
        await asyncio.sleep(LEASE * 1.5)  # halted stays halted: nothing skipped
        assert await inbox.stored_cursor() == cursor_of(2)
        assert world.effects.calls == []
        assert inbox.health().state == "halted"

        await inbox.reset("")  # the operator accepts the loss: from the oldest kept
        await wait_for(applied_all(world, ids[4:]))
        assert await applied(world.engine) == ids[4:]
        assert inbox.health().ok
    finally:
        await inbox.stop()


async def test_a_refused_cursor_halts_too(world: World) -> None:
    world.feed.add_jobs(1)
    inbox = world.inbox()
    await inbox.reset("not-a-cursor")
    await inbox.start()
    try:
        await wait_for(_state_is(inbox, "halted"))
        assert "cursor refused" in (inbox.health().last_error or "")
        assert world.effects.calls == []
    finally:
        await inbox.stop()


async def test_jobservice_away_pauses_then_the_feed_resumes(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="san_jobs.client.inbox")
    ids = world.feed.add_jobs(2)
    world.feed.fail_next = [grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAVAILABLE] * 2
    inbox = world.inbox()
    await inbox.start()
    try:
        await wait_for(applied_all(world, ids))
        away = [r for r in caplog.records if "JobService away" in r.getMessage()]
        assert away and away[0].levelno == logging.ERROR  # the token refused: an error
        assert await applied(world.engine) == ids
        assert len(world.feed.requests) >= 5
        assert inbox.health().state == "consuming"
    finally:
        await inbox.stop()


async def test_the_feed_followed_live_reaches_the_handler(world: World) -> None:
    inbox = world.inbox()
    await inbox.start()
    try:
        await wait_for(lambda: _opened(world.feed, 1))
        await asyncio.sleep(0.1)
        ids = world.feed.add_jobs(3)
        await wait_for(applied_all(world, ids))
        assert await applied(world.engine) == ids
        assert len(world.feed.requests) == 1  # one stream, followed
        health = inbox.health()
        assert health.holds_lease and health.cursor == cursor_of(3)
        assert health.last_change_at is not None
    finally:
        await inbox.stop()
    assert inbox.health().state == "stopped"


def _state_is(inbox: Inbox, state: str) -> object:
    async def check() -> bool:
        return inbox.health().state == state

    return check
