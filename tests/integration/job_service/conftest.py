"""JobService in-process on a real loopback port, on SQLite and on PostgreSQL, with
a scripted AiGateway on another real port."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from san_jobs.job_service.server import JobServiceRuntime, prepare_database
from san_jobs.job_service.settings import JobServiceSettings
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from tests.integration.job_service.scripted_gateway import ScriptedGateway, start_scripted_gateway
from tests.support.ci import skip_or_fail_in_ci
from tests.support.databases import (
    create_temp_postgres_database_async,
    drop_database_async,
    postgres_unreachable_reason,
    put_migrated_sqlite_file,
)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A migrated database of its own per test: a copy of the migrated SQLite file, or
    a PostgreSQL database made from the migrated template (tests.support.databases).
    Its own, not a TRUNCATEd shared one: these tests run whole JobServices, whose
    background tasks may outlive a test by a moment."""
    if request.param == "sqlite":
        path = tmp_path / "jobs.db"
        put_migrated_sqlite_file(path)
        yield f"sqlite+aiosqlite:///{path}"
        return
    reason = await postgres_unreachable_reason()
    if reason is not None:
        skip_or_fail_in_ci(reason)
    url = await create_temp_postgres_database_async()
    yield url
    await drop_database_async(url)


@dataclass
class Service:
    runtime: JobServiceRuntime
    stub: pb_grpc.JobServiceStub
    channel: grpc.aio.Channel
    gateway: ScriptedGateway


StartService = Callable[..., Awaitable[Service]]


@pytest.fixture
async def scripted_gateway() -> AsyncIterator[tuple[ScriptedGateway, str]]:
    gateway = ScriptedGateway()
    server, address = await start_scripted_gateway(gateway)
    yield gateway, address
    await server.stop(None)


@pytest.fixture
async def start_service(
    database_url: str, scripted_gateway: tuple[ScriptedGateway, str]
) -> AsyncIterator[StartService]:
    """`await start_service(workers=1, ...)`: a running JobService with those settings."""
    started: list[Service] = []
    gateway, address = scripted_gateway

    async def start(**overrides: Any) -> Service:
        settings = JobServiceSettings(
            listen=overrides.pop("listen", "127.0.0.1:0"),
            database_url=database_url,
            gateway=overrides.pop("gateway", address),
            retry_base_delay=overrides.pop("retry_base_delay", 0.05),
            retry_max_delay=overrides.pop("retry_max_delay", 0.2),
            poll_interval=overrides.pop("poll_interval", 0.2),
            grace=overrides.pop("grace", 0.3),
            **overrides,
        )
        await prepare_database(settings)
        runtime = JobServiceRuntime(settings)
        await runtime.start()
        channel = grpc.aio.insecure_channel(runtime.address)
        service = Service(runtime, pb_grpc.JobServiceStub(channel), channel, gateway)
        started.append(service)
        return service

    yield start
    for service in reversed(started):
        await service.channel.close()
        await service.runtime.stop()


@pytest.fixture
async def service(start_service: StartService) -> Service:
    return await start_service()
