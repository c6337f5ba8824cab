"""Parts of the inbox's unit tests (no tests here): a change feed served by an
in-process grpc.aio JobService from a list, the application's database (a SQLite file
or a fresh PostgreSQL database) and a handler that writes one row per change."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import sqlalchemy as sa
from _clients_support import bad_request, error_info
from google.protobuf import any_pb2
from google.rpc import status_pb2
from grpc_status import rpc_status
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from san_jobs.client import AsyncJobsClient
from san_jobs.client.inbox import create_inbox_tables
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from tests.support.ci import skip_or_fail_in_ci
from tests.support.databases import (
    create_temp_postgres_database_async,
    drop_database_async,
    postgres_unreachable_reason,
)

METADATA = sa.MetaData()
EFFECTS = sa.Table(
    "effects",
    METADATA,
    sa.Column("n", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.String(36), nullable=False),  # not unique: a repeat would show
    sa.Column("status", sa.String(32), nullable=False),
)


def cursor_of(index: int) -> str:
    return f"c{index:08d}"


def _rich(code: grpc.StatusCode, message: str, *details: Any) -> Any:
    status = status_pb2.Status(code=code.value[0], message=message)
    for detail in details:
        packed = any_pb2.Any()
        packed.Pack(detail)
        status.details.append(packed)
    return rpc_status.to_status(status)


class ChangeFeed(pb_grpc.JobServiceServicer):
    """StreamJobChanges over a list: change i (from 1) has cursor c<i>; a ``None``
    job is a progress mark. Changes before ``oldest_kept`` are pruned (a cursor
    before them is CURSOR_EXPIRED); ``fail_next`` aborts the next streams with
    those codes. It follows live: ``add`` reaches the open streams."""

    def __init__(self) -> None:
        self.changes: list[pb.Job | None] = []
        self.oldest_kept = 1
        self.requests: list[pb.StreamJobChangesRequest] = []
        self.fail_next: list[grpc.StatusCode] = []
        self.open_streams = 0
        self._waiters: set[asyncio.Event] = set()

    def add(self, job: pb.Job | None) -> str:
        self.changes.append(job)
        for waiter in self._waiters:
            waiter.set()
        return cursor_of(len(self.changes))

    def add_jobs(
        self, count: int, status: pb.JobStatus.ValueType = pb.JOB_STATUS_COMPLETED
    ) -> list[str]:
        ids = []
        for _ in range(count):
            job = pb.Job(id=str(uuid.uuid4()), status=status, job_type=pb.JOB_TYPE_CARD_ANALYSIS)
            self.add(job)
            ids.append(job.id)
        return ids

    def ids(self) -> list[str]:
        return [job.id for job in self.changes if job is not None]

    async def StreamJobChanges(
        self, request: pb.StreamJobChangesRequest, context: Any
    ) -> AsyncIterator[pb.StreamJobChangesResponse]:
        self.requests.append(request)
        if self.fail_next:
            await context.abort(self.fail_next.pop(0), "scripted failure")
        after = request.after_cursor
        if after == "":
            position = self.oldest_kept - 1
        elif len(after) == 9 and after[0] == "c" and after[1:].isdigit():
            position = int(after[1:])
        else:
            await context.abort_with_status(
                _rich(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "after_cursor is not a cursor of this service",
                    bad_request(("after_cursor", "not a cursor of this service")),
                )
            )
            return
        if position < self.oldest_kept - 1:
            await context.abort_with_status(
                _rich(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    "the changes after this cursor are no longer kept",
                    error_info(
                        "CURSOR_EXPIRED",
                        oldestCursor=cursor_of(self.oldest_kept),
                        afterCursor=after,
                    ),
                )
            )
            return
        self.open_streams += 1
        try:
            while True:
                while position < len(self.changes):
                    position += 1
                    job = self.changes[position - 1]
                    if job is not None and not _matches(job, request):
                        continue
                    response = pb.StreamJobChangesResponse(cursor=cursor_of(position))
                    if job is not None:
                        response.job.CopyFrom(job)
                    yield response
                waiter = asyncio.Event()
                self._waiters.add(waiter)
                try:
                    await waiter.wait()
                finally:
                    self._waiters.discard(waiter)
        finally:
            self.open_streams -= 1


def _matches(job: pb.Job, request: pb.StreamJobChangesRequest) -> bool:
    return (not request.job_types or job.job_type in request.job_types) and (
        not request.statuses or job.status in request.statuses
    )


@asynccontextmanager
async def serving() -> AsyncIterator[tuple[ChangeFeed, AsyncJobsClient]]:
    """The feed's server, and a client of it."""
    server = grpc.aio.server()
    feed = ChangeFeed()
    pb_grpc.add_JobServiceServicer_to_server(feed, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    client = AsyncJobsClient(f"127.0.0.1:{port}", timeout=5)
    try:
        yield feed, client
    finally:
        await client.close()
        await server.stop(None)


@asynccontextmanager
async def app_database(backend: str, tmp_path: Path) -> AsyncIterator[str]:
    """The application's database URL, its inbox tables and ``effects`` made."""
    if backend == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'app.db'}"
    else:
        reason = await postgres_unreachable_reason()
        if reason is not None:
            skip_or_fail_in_ci(reason)
        url = await create_temp_postgres_database_async(migrated=False)
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await create_inbox_tables(conn)
            await conn.run_sync(METADATA.create_all)
    finally:
        await engine.dispose()
    try:
        yield url
    finally:
        if backend == "postgres":
            await drop_database_async(url)


class Effects:
    """The handler: one ``effects`` row per change it is called with (in the inbox's
    transaction); ``calls`` counts every call, rolled back or not. ``before`` runs
    first, ``after`` once the row is written (to fail or block a chosen change)."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.before: Callable[[pb.Job], Awaitable[None]] | None = None
        self.after: Callable[[pb.Job], Awaitable[None]] | None = None

    async def __call__(self, conn: AsyncConnection, job: pb.Job) -> None:
        self.calls.append(job.id)
        if self.before is not None:
            await self.before(job)
        await conn.execute(
            EFFECTS.insert().values(job_id=job.id, status=pb.JobStatus.Name(job.status))
        )
        if self.after is not None:
            await self.after(job)


async def applied(engine: AsyncEngine) -> list[str]:
    """The job ids of the rows the handler committed, in order."""
    async with engine.connect() as conn:
        return list(
            (await conn.execute(sa.select(EFFECTS.c.job_id).order_by(EFFECTS.c.n))).scalars()
        )


async def wait_for(condition: Callable[[], Awaitable[bool]], within: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while not await condition():
        if loop.time() > end:
            raise AssertionError(f"condition not met within {within}s")
        await asyncio.sleep(0.02)
