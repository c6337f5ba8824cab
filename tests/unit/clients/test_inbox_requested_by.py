"""The SDK inbox told whose jobs it applies (issue 42, point 13; defence in depth), on
SQLite and PostgreSQL: a change of another caller's job reaches no handler, is logged
with its job id and requested_by, and its cursor is stored so the feed goes on; told
nothing, the inbox applies every change as before."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from test_inbox_support import ChangeFeed, Effects, app_database, applied, cursor_of, serving
from test_inbox_support import wait_for as wait_until

from san_jobs.client import AsyncJobsClient
from san_jobs.client.inbox import Inbox
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def world(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[ChangeFeed, AsyncJobsClient, AsyncEngine]]:
    async with app_database(request.param, tmp_path) as url, serving() as (feed, client):
        engine = create_async_engine(url)
        try:
            yield feed, client, engine
        finally:
            await engine.dispose()


def _change_of(feed: ChangeFeed, requested_by: str) -> str:
    job = pb.Job(
        id=str(uuid.uuid4()),
        status=pb.JOB_STATUS_COMPLETED,
        job_type=pb.JOB_TYPE_CARD_ANALYSIS,
        requested_by=requested_by,
    )
    feed.add(job)
    return job.id


async def test_changes_of_another_callers_jobs_are_logged_not_applied(
    world: tuple[ChangeFeed, AsyncJobsClient, AsyncEngine], caplog: pytest.LogCaptureFixture
) -> None:
    feed, client, engine = world
    mine = _change_of(feed, "san-web")
    theirs = _change_of(feed, "mallory")
    mine_too = _change_of(feed, "san-web")
    effects = Effects()
    inbox = Inbox(engine, client, "cards", effects, lease=0.6, requested_by="san-web")
    caplog.set_level(logging.WARNING, logger="san_jobs.client.inbox")
    await inbox.start()
    try:

        async def past_all() -> bool:
            return await inbox.stored_cursor() == cursor_of(3)

        await wait_until(past_all)
        assert effects.calls == [mine, mine_too]
        assert await applied(engine) == [mine, mine_too]
        assert inbox.health().ignored == 1
        warned = [r.getMessage() for r in caplog.records if theirs in r.getMessage()]
        assert len(warned) == 1 and "'mallory'" in warned[0], warned
    finally:
        await inbox.stop()


async def test_an_inbox_told_nobody_applies_every_change(
    world: tuple[ChangeFeed, AsyncJobsClient, AsyncEngine],
) -> None:
    feed, client, engine = world
    ids = [_change_of(feed, "san-web"), _change_of(feed, "mallory")]
    inbox = Inbox(engine, client, "cards", Effects(), lease=0.6)
    await inbox.start()
    try:

        async def both() -> bool:
            return len(await applied(engine)) == 2

        await wait_until(both)
        assert await applied(engine) == ids
        assert inbox.health().ignored == 0
    finally:
        await inbox.stop()
