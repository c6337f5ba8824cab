"""The SDK inbox against a real JobService serving StreamJobChanges (issue 24 part 2),
on SQLite and PostgreSQL: completed jobs reach the handler once each, and a new
instance after a stop resumes from the stored cursor without repeats."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from san_jobs.client import AsyncJobsClient, CardAnalysisInput, JobStatus
from san_jobs.client.inbox import Inbox, create_inbox_tables
from san_jobs.job_service.server import JobServiceRuntime, prepare_database
from san_jobs.job_service.settings import JobServiceSettings
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from tests.integration.job_service.scripted_gateway import ScriptedGateway, start_scripted_gateway
from tests.integration.outbox.outbox_support import database_pair, wait_for
from tests.support.databases import drop_database_async

METADATA = sa.MetaData()
CARDS = sa.Table(
    "cards",
    METADATA,
    sa.Column("n", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.String(36), nullable=False),  # not unique: a repeat would show
)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def running(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[AsyncJobsClient, AsyncEngine]]:
    backend: str = request.param
    jobs_url, app_url = await database_pair(backend, tmp_path)
    gateway_server, gateway_address = await start_scripted_gateway(ScriptedGateway())
    settings = JobServiceSettings(
        listen="127.0.0.1:0",
        database_url=jobs_url,
        gateway=gateway_address,
        poll_interval=0.2,
        grace=0.3,
    )
    await prepare_database(settings)
    runtime = JobServiceRuntime(settings)
    await runtime.start()
    engine = create_async_engine(app_url)
    async with engine.begin() as conn:
        await create_inbox_tables(conn)
        await conn.run_sync(METADATA.create_all)
    client = AsyncJobsClient(runtime.address, timeout=5)
    try:
        yield client, engine
    finally:
        await client.close()
        await engine.dispose()
        await runtime.stop()
        await gateway_server.stop(None)
        if backend == "postgres":
            await drop_database_async(jobs_url)
            await drop_database_async(app_url)


async def save(conn: AsyncConnection, job: pb.Job) -> None:
    await conn.execute(CARDS.insert().values(job_id=job.id))


async def cards(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:
        return list((await conn.execute(sa.select(CARDS.c.job_id).order_by(CARDS.c.n))).scalars())


async def enqueue(client: AsyncJobsClient, count: int, start: int) -> list[str]:
    ids = []
    for n in range(start, start + count):
        response = await client.enqueue(f"scrap-{n}", CardAnalysisInput(text=f"Text {n}."))
        ids.append(response.job.id)
    return ids


def count_is(engine: AsyncEngine, count: int) -> Any:
    async def check() -> bool:
        return len(await cards(engine)) >= count

    return check


async def test_completed_jobs_reach_the_handler_once_across_restarts(
    running: tuple[AsyncJobsClient, AsyncEngine],
) -> None:
    client, engine = running
    options: dict[str, Any] = {"statuses": [JobStatus.JOB_STATUS_COMPLETED], "lease": 1.0}
    first = Inbox(engine, client, "cards", save, **options)
    await first.start()
    try:
        ids = await enqueue(client, 4, 0)
        await wait_for(count_is(engine, 4))
    finally:
        await first.stop()
    stored = await first.stored_cursor()
    assert stored  # a cursor of the real feed, stored with the last card

    later = await enqueue(client, 3, 4)  # while no inbox runs
    for job_id in later:
        done = await client.wait(job_id, timeout=20)
        assert done.status == JobStatus.JOB_STATUS_COMPLETED
    second = Inbox(engine, client, "cards", save, **options)
    await second.start()
    try:
        await wait_for(count_is(engine, 7))
        assert sorted(await cards(engine)) == sorted(ids + later)  # each once
        assert second.health().ok and second.health().holds_lease
    finally:
        await second.stop()
