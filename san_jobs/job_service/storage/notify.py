"""PostgreSQL change notifications between JobService instances.

Every write that changes jobs runs `pg_notify('san_jobs', payload)` inside its own
transaction, so the notice is delivered at commit and only if it commits. The payload
is `<instance_id>|<status>|<id>,<id>,...` (the jobs' new status), at most
IDS_PER_NOTIFICATION ids each, below PostgreSQL's 8,000-byte limit. Listeners re-read
the rows: the ids are the news, the database is the truth.

This module defines the format; the one encoder is SQL, run by the writing statement
itself (`TransitionSql.notifying` in transition_sql.py, from the constants below), and
`parse_payload` is its one reader.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy import URL

from san_jobs.job_service.storage.engine import normalize_url
from san_jobs.shared.background import BackgroundLoop

CHANNEL = "san_jobs"
# Between the origin, the status and the ids; between two ids.
FIELD_SEPARATOR = "|"
ID_SEPARATOR = ","
# A payload stays below this (PostgreSQL refuses 8,000 bytes and more): 150 ids of
# 36 characters and their separators take 5,550 bytes, the rest is the prefix's.
MAX_PAYLOAD_BYTES = 7_000
IDS_PER_NOTIFICATION = 150

OnChange = Callable[[str, str, list[str]], Awaitable[None] | None]
OnReconnect = Callable[[], Awaitable[None] | None]

log = logging.getLogger("job_service.storage.notify")


def payload_prefix(instance_id: str) -> str:
    """What every payload sent by `instance_id` starts with (then the status)."""
    return instance_id + FIELD_SEPARATOR


def parse_payload(payload: str) -> tuple[str, str, list[str]]:
    """(origin_instance_id, status, job_ids) from a payload; ValueError if it has not
    three fields."""
    origin, status, ids = payload.split(FIELD_SEPARATOR, 2)
    return origin, status, [i for i in ids.split(ID_SEPARATOR) if i]


def asyncpg_dsn(database_url: str | URL) -> str:
    """The plain libpq-style DSN asyncpg wants, from a SQLAlchemy URL."""
    url = normalize_url(database_url)
    if url.get_backend_name() != "postgresql":
        raise ValueError("change notifications need PostgreSQL")
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


async def _call(callback: Callable[..., Awaitable[None] | None], *args: Any) -> None:
    result = callback(*args)
    if inspect.isawaitable(result):
        await result


class PgChangeListener:
    """One dedicated connection that LISTENs on `san_jobs` and calls
    `on_change(origin_instance_id, status, job_ids)` for each notification, in order
    (but those whose origin is `ignore_origin`: an instance's own changes).

    If the connection drops (or stops answering the keepalive), it reconnects with
    backoff and then calls `on_reconnect()`: notices sent while it was away are lost,
    so the caller re-reads what it cares about."""

    def __init__(
        self,
        database_url: str | URL,
        on_change: OnChange,
        *,
        on_reconnect: OnReconnect | None = None,
        channel: str = CHANNEL,
        ignore_origin: str | None = None,
        keepalive_seconds: float = 10.0,
        min_backoff: float = 0.1,
        max_backoff: float = 5.0,
    ) -> None:
        self._dsn = asyncpg_dsn(database_url)
        self._on_change = on_change
        self._on_reconnect = on_reconnect
        self._channel = channel
        self._keepalive = keepalive_seconds
        self._min_backoff = min_backoff
        self._max_backoff = max_backoff
        # Our own notifications come back to us too: dropped on arrival, unqueued.
        self._own_prefix = None if ignore_origin is None else payload_prefix(ignore_origin)
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        # The connection's keeper (it reconnects itself with backoff) and the queue's
        # reader: two loops, so a slow on_change never delays the keepalive.
        self._listen_loop = BackgroundLoop("pg-change-listener", self._run)
        self._dispatch_loop = BackgroundLoop("pg-change-dispatch", self._dispatch)
        self._conn: asyncpg.Connection | None = None
        self._listening = asyncio.Event()
        self.connections_made = 0

    async def start(self, *, wait: bool = True, wait_seconds: float = 10.0) -> None:
        """Start listening; with `wait`, return once the first LISTEN is in place."""
        if self._listen_loop.running:
            return
        self._listen_loop.start()
        self._dispatch_loop.start()
        if wait:
            async with asyncio.timeout(wait_seconds):
                await self._listening.wait()

    async def stop(self) -> None:
        await self._listen_loop.stop()
        await self._dispatch_loop.stop()
        await self._close_connection()

    async def _close_connection(self) -> None:
        conn, self._conn = self._conn, None
        self._listening.clear()
        if conn is not None and not conn.is_closed():
            try:
                await asyncio.wait_for(conn.close(), 2.0)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
                conn.terminate()

    def _notified(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        if self._own_prefix is not None and payload.startswith(self._own_prefix):
            return
        self._queue.put_nowait(payload)

    async def _run(self) -> None:
        backoff = self._min_backoff
        while True:
            lost = asyncio.Event()
            try:
                conn = await asyncpg.connect(self._dsn, timeout=10)
                self._conn = conn
                conn.add_termination_listener(lambda _c, lost=lost: lost.set())
                await conn.add_listener(self._channel, self._notified)
                self.connections_made += 1
                self._listening.set()
                backoff = self._min_backoff
                if self.connections_made > 1 and self._on_reconnect is not None:
                    await _call(self._on_reconnect)
                await self._watch(conn, lost)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("change listener: connection problem (%s); retrying", exc)
            await self._close_connection()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self._max_backoff)

    async def _watch(self, conn: asyncpg.Connection, lost: asyncio.Event) -> None:
        """Return when the connection is gone or stops answering."""
        while not lost.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(lost.wait(), self._keepalive)
                return
            await conn.execute("SELECT 1", timeout=self._keepalive)

    async def _dispatch(self) -> None:
        while True:
            payload = await self._queue.get()
            try:
                origin, status, ids = parse_payload(payload)
            except ValueError:
                log.warning("change listener: ignoring malformed payload %r", payload[:100])
                continue
            try:
                await _call(self._on_change, origin, status, ids)
            except Exception:
                log.exception("change listener: on_change failed")
