"""Fixtures of the outbox tests (see outbox_support)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from san_jobs.client import AsyncJobsClient
from san_jobs.client.outbox import create_outbox_table
from san_jobs.job_service.server import JobServiceRuntime, prepare_database
from san_jobs.job_service.settings import JobServiceSettings
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from tests.integration.job_service.scripted_gateway import ScriptedGateway, start_scripted_gateway
from tests.integration.outbox.outbox_support import (
    EnqueueProxy,
    Stack,
    database_pair,
    free_port,
)
from tests.support.databases import drop_database_async


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def stack(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Stack]:
    """A running JobService behind a (running) counting proxy, and the app's engine
    with the outbox table created."""
    backend: str = request.param
    jobs_url, app_url = await database_pair(backend, tmp_path)
    gateway = ScriptedGateway()
    gateway_server, gateway_address = await start_scripted_gateway(gateway)
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
    jobs_channel = grpc.aio.insecure_channel(runtime.address)
    address = f"127.0.0.1:{free_port()}"
    app_engine = create_async_engine(app_url)
    async with app_engine.begin() as conn:
        await create_outbox_table(conn)
    client = AsyncJobsClient(address, timeout=5)
    built = Stack(
        app_engine=app_engine,
        gateway=gateway,
        client=client,
        proxy=EnqueueProxy(pb_grpc.JobServiceStub(jobs_channel)),
        jobs=pb_grpc.JobServiceStub(jobs_channel),
        address=address,
        app_url=app_url,
    )
    await built.proxy_up()
    try:
        yield built
    finally:
        await built.proxy_down()
        await client.close()
        await app_engine.dispose()
        await jobs_channel.close()
        await runtime.stop()
        await gateway_server.stop(None)
        if backend == "postgres":
            await drop_database_async(jobs_url)
            await drop_database_async(app_url)
