"""SqlJobStore.ping: does the database answer? For health checks (san_jobs.job_service.db_health).

PostgreSQL: `SELECT 1` on one asyncpg connection of the ping's own, outside the
store's pools, so pools busy with jobs never make a reachable database look down, and
a check costs no new server process (a connection per check would fork one every few
seconds). A connection that failed or timed out in any way is terminated at once (no
goodbye to a server that may not answer) and the next check opens a new one.

SQLite: "unreachable" means the file the store was opened on is gone or cannot be
read and written, or a query fails. An open SQLite connection keeps reading and
writing a deleted file (its inode lives on), so the file is looked at by its path
first; then `SELECT 1` goes through the store's own engine (a local file: no pool
to starve).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from san_jobs.job_service.domain.errors import StorageUnavailableError
from san_jobs.job_service.storage.errors import storage_errors
from san_jobs.job_service.storage.notify import asyncpg_dsn

_SELECT_ONE = "SELECT 1"


class DatabasePing:
    """`ping()` for the database behind `engine`; `close()` when done. The caller
    bounds a ping's time (asyncio.timeout): a cancelled ping drops its connection."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._pg = engine.dialect.name == "postgresql"
        self._conn: Any = None  # the asyncpg connection kept between checks
        database = engine.url.database or ""
        self._sqlite_file = (
            database if not self._pg and database and database != ":memory:" else None
        )

    async def ping(self) -> None:
        """Return once the database answered; StorageUnavailableError (saying why)
        when it cannot be reached."""
        try:
            if self._pg:
                await self._ping_postgres()
            else:
                await self._ping_sqlite()
        except BaseException:  # a cancellation (the caller's timeout) too
            self._drop()
            raise

    async def _ping_postgres(self) -> None:
        with storage_errors():
            if self._conn is None or self._conn.is_closed():
                self._conn = await asyncpg.connect(asyncpg_dsn(self._engine.url))
            await self._conn.fetchval(_SELECT_ONE)

    async def _ping_sqlite(self) -> None:
        if self._sqlite_file is not None:
            try:
                os.stat(self._sqlite_file)
            except OSError as error:
                raise StorageUnavailableError(
                    f"database unavailable: the SQLite file cannot be found ({error.strerror})"
                ) from None
            if not os.access(self._sqlite_file, os.R_OK | os.W_OK):
                raise StorageUnavailableError(
                    "database unavailable: the SQLite file cannot be read and written"
                )
        with storage_errors():
            async with self._engine.connect() as conn:
                await conn.execute(text(_SELECT_ONE))

    def _drop(self) -> None:
        # terminate(), not close(): close() waits for a server that may be gone.
        if self._conn is not None:
            self._conn.terminate()
            self._conn = None

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                await asyncio.wait_for(conn.close(), 1.0)
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
                conn.terminate()
