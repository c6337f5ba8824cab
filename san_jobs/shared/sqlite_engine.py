"""SQLite connections as our services open them: PRAGMAs at connect, and BEGIN taken
from the driver so a transaction begins as the service says (job-service's writers and
san-web's every transaction IMMEDIATE: a transaction that reads and then writes takes
the write lock at BEGIN, waiting up to busy_timeout, instead of failing at once with
"database is locked" when another connection wrote in between).

PostgreSQL needs none of this."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import ConnectionPoolEntry

# A connection waits this long for another's write lock before "database is locked".
SQLITE_BUSY_TIMEOUT_MS = 10_000

# Execution option read by the "begin" hook: DEFERRED, IMMEDIATE, or NONE (autocommit:
# each statement its own transaction).
SQLITE_BEGIN_OPTION = "san_sqlite_begin"


def configure_sqlite(engine: AsyncEngine, pragmas: Sequence[str], *, begin: str) -> None:
    """Run `pragmas` (each "name=value") on every new connection of `engine`, and begin
    each transaction with BEGIN `begin` (unless the connection's SQLITE_BEGIN_OPTION
    says otherwise)."""

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
        # Take BEGIN away from the driver; the "begin" hook below emits it.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            for pragma in pragmas:
                cursor.execute(f"PRAGMA {pragma}")
        finally:
            cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        mode = conn.get_execution_options().get(SQLITE_BEGIN_OPTION, begin)
        if mode == "NONE":
            return
        conn.exec_driver_sql(f"BEGIN {mode}")
