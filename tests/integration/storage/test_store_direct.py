"""The hot statements on PostgreSQL, run on held asyncpg connections: a connection the
database dropped is replaced, and a held connection goes back to the pool clean."""

from __future__ import annotations

import asyncio

import asyncpg  # type: ignore[import-untyped]
import pytest
from _storage_support import enqueue

from san_jobs.job_service.domain.errors import StorageUnavailableError
from san_jobs.job_service.domain.model import JobFilter, JobStatus
from san_jobs.job_service.domain.ports import ClaimParams, CompleteParams, ListJobsParams
from san_jobs.job_service.storage.notify import asyncpg_dsn
from san_jobs.job_service.storage.repository import SqlJobStore
from tests.support.clock import FakeClock

pytestmark = pytest.mark.postgres


class _Unaware:
    """An asyncpg connection that does not know it is closed yet."""

    def __init__(self, connection: asyncpg.Connection) -> None:
        self._connection = connection

    def is_closed(self) -> bool:
        return False

    def __getattr__(self, name: str) -> object:
        return getattr(self._connection, name)


async def _terminate_other_backends(url: str) -> int:
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        return int(
            await conn.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        )
    finally:
        await conn.close()


async def test_a_dropped_connection_is_replaced(clean_postgres_url: str, clock: FakeClock) -> None:
    store = SqlJobStore(clean_postgres_url, instance_id="direct", clock=clock)
    try:
        await enqueue(store, "before")
        (claim,) = await store.worker.claim(ClaimParams(limit=5, lease_seconds=60))
        assert await _terminate_other_backends(clean_postgres_url) >= 1
        await asyncio.sleep(0.2)  # the held connections hear that they were ended
        # Idle connections the database ended are replaced before the next statement.
        await enqueue(store, "during")
        done = await store.worker.complete(
            CompleteParams(job_id=claim.job.id, token=claim.token, result={"summary": "ok"})
        )
        assert done.status is JobStatus.COMPLETED
        (again,) = await store.worker.claim(ClaimParams(limit=5, lease_seconds=60))
        assert again.job.target_id == "during"
    finally:
        await store.close()


async def test_a_connection_lost_under_a_statement_fails_that_statement_only(
    clean_postgres_url: str, clock: FakeClock
) -> None:
    """A statement whose connection breaks under it may or may not have run: its
    caller hears StorageUnavailableError, and the next statement gets a fresh one."""
    store = SqlJobStore(clean_postgres_url, instance_id="direct", clock=clock)
    try:
        await enqueue(store, "first")
        held = store._hot.enqueue_many.held
        held._driver.terminate()  # the socket breaks...
        held._driver = _Unaware(held._driver)  # ...before asyncpg could notice
        with pytest.raises(StorageUnavailableError):
            await enqueue(store, "lost")
        await enqueue(store, "after")
        assert {
            j.target_id
            for j in (
                await store.queries.list_jobs(
                    ListJobsParams(job_filter=JobFilter(), page_size=10, page_token=None)
                )
            )[0]
        } >= {
            "first",
            "after",
        }
    finally:
        await store.close()


async def test_held_connections_go_back_to_the_pool_with_the_planner_reset(
    clean_postgres_url: str, clock: FakeClock
) -> None:
    store = SqlJobStore(clean_postgres_url, instance_id="direct", clock=clock)
    await enqueue(store, "x")
    await store.worker.claim(
        ClaimParams(limit=1, lease_seconds=60)
    )  # takes the held claim connection (bitmap scans off)
    held = store._hot.claim.held
    driver = held._driver
    assert await driver.fetchval("SHOW enable_bitmapscan") == "off"
    await store.close()
    assert driver.is_closed() or await driver.fetchval("SHOW enable_bitmapscan") == "on"
