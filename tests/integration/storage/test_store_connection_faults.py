"""Held connections when PostgreSQL goes away under them (issue 9, point 15).

- An error the server sends on its own to an idle connection (at a shutdown:
  "terminating connection due to administrator command") leaves asyncpg's protocol
  busy until the socket closes; a statement that comes in between must not fail with
  asyncpg's "cannot switch to state 12; another operation (2) is in progress".
- The same goodbye on an idle connection of the pool (the reads', the change feed's):
  the statement that meets it fails UNAVAILABLE in words an operator can read (not
  asyncpg's "another operation (2) is in progress", which reads like our bug), and
  that connection never serves again.
- An enqueue whose INSERT committed but whose answer was lost is answered OK.
- An enqueue whose connection broke while its INSERT waited in the server is
  answered UNAVAILABLE only once that server process is gone, so it can never commit
  afterwards.

These are PostgreSQL-only: SQLite has no connection to lose.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest
from _storage_support import enqueue

from san_jobs.job_service.domain.errors import StorageUnavailableError
from san_jobs.job_service.domain.ports import ClaimParams
from san_jobs.job_service.storage.notify import asyncpg_dsn
from san_jobs.job_service.storage.repository import SqlJobStore
from tests.support.clock import FakeClock

pytestmark = pytest.mark.postgres


def _fatal_from_server() -> bytes:
    """The ErrorResponse PostgreSQL sends an idle session at a fast shutdown."""
    fields = b"".join(
        code + value.encode() + b"\0"
        for code, value in (
            (b"S", "FATAL"),
            (b"V", "FATAL"),
            (b"C", "57P01"),
            (b"M", "terminating connection due to administrator command"),
        )
    )
    body = fields + b"\0"
    return b"E" + struct.pack("!i", len(body) + 4) + body


class _AnswerLost:
    """The held asyncpg connection, whose next statement runs (and commits) but whose
    answer never arrives: the socket breaks first."""

    def __init__(self, connection: asyncpg.Connection) -> None:
        self._connection = connection

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        await self._connection.fetch(sql, *args)
        self._connection.terminate()
        raise asyncpg.exceptions.ConnectionDoesNotExistError(
            "connection was closed in the middle of operation"
        )

    def __getattr__(self, name: str) -> object:
        return getattr(self._connection, name)


class _SocketBreaksWhileWaiting:
    """The held asyncpg connection, whose socket breaks while its next statement
    waits in the server (for a lock): the server process lives on, statement sent."""

    def __init__(self, connection: asyncpg.Connection, url: str) -> None:
        self._connection = connection
        self._url = url
        self.server_pid: int = connection.get_server_pid()

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        running = asyncio.ensure_future(self._connection.fetch(sql, *args))
        await _until_a_statement_waits_for_a_lock(self._url)  # it reached the server
        self._connection._transport.abort()
        result: list[Any] = await running  # ConnectionDoesNotExistError
        return result

    def __getattr__(self, name: str) -> object:
        return getattr(self._connection, name)


async def _until_a_statement_waits_for_a_lock(url: str) -> None:
    """Return once a session of the test's database waits for a lock. PostgreSQL
    announces no such thing, so pg_stat_activity is polled (for 10 s at most)."""
    waiting = (
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        for _ in range(1000):
            if await conn.fetchval(waiting):
                return
            await asyncio.sleep(0.01)
        raise AssertionError("no statement waits for a lock after 10 s")
    finally:
        await conn.close()


async def _server_process_exists(url: str, pid: int) -> bool:
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        return bool(
            await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid)
        )
    finally:
        await conn.close()


async def _stored_targets(url: str) -> set[str]:
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        return {r["target_id"] for r in await conn.fetch("SELECT target_id FROM async_jobs")}
    finally:
        await conn.close()


@pytest.mark.parametrize("statement", ["enqueue_many", "claim"])
async def test_a_statement_right_after_the_server_ended_the_idle_connection_succeeds(
    clean_postgres_url: str, clock: FakeClock, statement: str
) -> None:
    store = SqlJobStore(clean_postgres_url, instance_id="faults", clock=clock)
    try:
        await enqueue(store, "first")
        await store.worker.claim(
            ClaimParams(limit=1, lease_seconds=60)
        )  # both held connections are taken
        held = getattr(store._hot, statement).held
        # The server's goodbye has arrived, the end of the socket not yet.
        held._driver._protocol.data_received(_fatal_from_server())
        assert not held._driver.is_closed()
        if statement == "enqueue_many":
            await enqueue(store, "second")
            assert await _stored_targets(clean_postgres_url) == {"first", "second"}
        else:
            await enqueue(store, "second")
            (claim,) = await store.worker.claim(ClaimParams(limit=1, lease_seconds=60))
            assert claim.job.target_id == "second"
    finally:
        await store.close()


async def test_a_pooled_connection_the_server_ended_fails_readably_and_is_dropped(
    clean_postgres_url: str, clock: FakeClock
) -> None:
    store = SqlJobStore(clean_postgres_url, instance_id="faults", clock=clock)
    try:
        job = await enqueue(store, "first")
        async with store._db.autocommit.connect() as conn:  # the pool's one idle connection
            driver = (await conn.get_raw_connection()).driver_connection
            ended_pid = driver.get_server_pid()
            # The server's goodbye has arrived, the end of the socket not yet.
            driver._protocol.data_received(_fatal_from_server())
        with pytest.raises(StorageUnavailableError) as refused:
            await store.queries.get(job.id)
        assert str(refused.value) == (
            "database unavailable: the server had ended this connection (statement not sent)"
        )
        assert (await store.queries.get(job.id)).target_id == "first"  # on another connection
        async with store._db.autocommit.connect() as conn:
            driver = (await conn.get_raw_connection()).driver_connection
            assert driver.get_server_pid() != ended_pid
    finally:
        await store.close()


async def test_an_enqueue_whose_answer_was_lost_after_its_commit_is_answered_ok(
    clean_postgres_url: str, clock: FakeClock
) -> None:
    store = SqlJobStore(clean_postgres_url, instance_id="faults", clock=clock)
    try:
        await enqueue(store, "first")
        held = store._hot.enqueue_many.held
        held._driver = _AnswerLost(held._driver)
        job = await enqueue(store, "committed")
        assert job.target_id == "committed"
        assert await _stored_targets(clean_postgres_url) == {"first", "committed"}
        await enqueue(store, "after")  # a fresh held connection
    finally:
        await store.close()


async def test_an_enqueue_answered_unavailable_can_never_commit_later(
    clean_postgres_url: str, clock: FakeClock
) -> None:
    store = SqlJobStore(clean_postgres_url, instance_id="faults", clock=clock)
    blocker = await asyncpg.connect(asyncpg_dsn(clean_postgres_url))
    try:
        await enqueue(store, "first")
        held = store._hot.enqueue_many.held
        breaking = _SocketBreaksWhileWaiting(held._driver, clean_postgres_url)
        held._driver = breaking
        blocking = blocker.transaction()
        await blocking.start()
        # Inserts wait for this lock; reads (the store's check) do not.
        await blocker.execute("LOCK TABLE async_jobs IN EXCLUSIVE MODE")
        with pytest.raises(StorageUnavailableError):
            await enqueue(store, "told-failed")
        # Its server process is gone already, so nothing of it can commit after this.
        assert not await _server_process_exists(clean_postgres_url, breaking.server_pid)
        await blocking.commit()
        assert await _stored_targets(clean_postgres_url) == {"first"}
    finally:
        await blocker.close()
        await store.close()


async def test_closing_a_held_connection_waits_for_its_statement(
    clean_postgres_url: str, clock: FakeClock
) -> None:
    """close() never runs its session reset on a connection a statement is using."""
    store = SqlJobStore(clean_postgres_url, instance_id="faults", clock=clock)
    blocker = await asyncpg.connect(asyncpg_dsn(clean_postgres_url))
    try:
        await enqueue(store, "first")
        held = store._hot.enqueue_many.held
        blocking = blocker.transaction()
        await blocking.start()
        await blocker.execute("LOCK TABLE async_jobs IN EXCLUSIVE MODE")
        slow = asyncio.ensure_future(enqueue(store, "slow"))
        await _until_a_statement_waits_for_a_lock(clean_postgres_url)  # the INSERT, held conn
        closing = asyncio.ensure_future(held.close())
        await asyncio.sleep(0.2)
        await blocking.commit()
        assert (await slow).target_id == "slow"
        await closing
        assert await _stored_targets(clean_postgres_url) == {"first", "slow"}
        await enqueue(store, "after close")  # on a connection of its own
    finally:
        await blocker.close()
        await store.close()
