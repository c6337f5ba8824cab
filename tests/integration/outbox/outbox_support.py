"""Parts for the outbox tests: the counting proxy, the stack a test works with.

The outbox against a real JobService, on SQLite and on PostgreSQL.

Per test: an application database (the outbox's home: a SQLite file, or a fresh
PostgreSQL database), a real in-process JobService (own database, scripted gateway
that answers at once), and between them a counting gRPC proxy on its own loopback
port. The relay talks to the proxy, so a test can count Enqueue calls per request id,
take "JobService" away and bring it back on the same port, or lose an answer after
JobService committed.
"""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from sqlalchemy.ext.asyncio import AsyncEngine

from san_jobs.client import AsyncJobsClient
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from tests.integration.job_service.scripted_gateway import ScriptedGateway
from tests.support.ci import skip_or_fail_in_ci
from tests.support.databases import (
    create_temp_postgres_database_async,
    postgres_unreachable_reason,
)


@dataclass
class EnqueueProxy(pb_grpc.JobServiceServicer):
    """Forwards Enqueue to the real JobService and counts the calls per request_id.

    ``lose_answers``: that many calls are forwarded (JobService commits the job) and
    then answered DEADLINE_EXCEEDED, as a reply that came too late would be.
    """

    upstream: pb_grpc.JobServiceStub
    calls: Counter[str] = field(default_factory=Counter)
    arrivals: list[tuple[str, str]] = field(default_factory=list)  # (target_id, request_id)
    lose_answers: int = 0

    async def Enqueue(
        self, request: pb.EnqueueRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.EnqueueResponse:
        self.calls[request.request_id] += 1
        self.arrivals.append((request.target_id, request.request_id))
        try:
            response: pb.EnqueueResponse = await self.upstream.Enqueue(request, timeout=10)
        except grpc.aio.AioRpcError as error:
            await context.abort(
                error.code(), error.details() or "", tuple(error.trailing_metadata() or ())
            )
        if self.lose_answers > 0:
            self.lose_answers -= 1
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "answer lost on the way")
        return response


@dataclass
class Stack:
    """What a test works with; ``proxy_up()``/``proxy_down()`` start and stop the
    JobService seen by the relay (at the same address each time)."""

    app_engine: AsyncEngine
    gateway: ScriptedGateway
    client: AsyncJobsClient
    proxy: EnqueueProxy
    jobs: pb_grpc.JobServiceStub
    address: str
    app_url: str
    _server: grpc.aio.Server | None = None

    async def proxy_up(self) -> None:
        server = grpc.aio.server()
        pb_grpc.add_JobServiceServicer_to_server(self.proxy, server)
        server.add_insecure_port(self.address)
        await server.start()
        self._server = server

    async def proxy_down(self) -> None:
        if self._server is not None:
            await self._server.stop(None)
            self._server = None

    async def jobs_for(self, target_id: str) -> list[pb.Job]:
        """Every job JobService holds for ``target_id`` (all types and states)."""
        response = await self.jobs.ListJobs(
            pb.ListJobsRequest(target_id=target_id, page_size=1000), timeout=10
        )
        return list(response.jobs)

    async def all_jobs(self) -> list[pb.Job]:
        response = await self.jobs.ListJobs(pb.ListJobsRequest(page_size=1000), timeout=10)
        return list(response.jobs)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def database_pair(backend: str, tmp_path: Path) -> tuple[str, str]:
    """(JobService's database, the application's database) on one backend."""
    if backend == "sqlite":
        return (
            f"sqlite+aiosqlite:///{tmp_path / 'jobs.db'}",
            f"sqlite+aiosqlite:///{tmp_path / 'app.db'}",
        )
    reason = await postgres_unreachable_reason()
    if reason is not None:
        skip_or_fail_in_ci(reason)
    jobs_url = await create_temp_postgres_database_async()
    app_url = await create_temp_postgres_database_async(migrated=False)
    return jobs_url, app_url


async def wait_for(condition: Callable[[], Awaitable[bool]], within: float = 20.0) -> None:
    """Poll ``condition`` until it holds; fail after ``within`` seconds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while not await condition():
        if loop.time() > end:
            raise AssertionError(f"condition not met within {within}s")
        await asyncio.sleep(0.02)
