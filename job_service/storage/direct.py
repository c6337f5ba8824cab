"""The hot statements on PostgreSQL, run on asyncpg's own connection.

Running a cached, compiled statement through SQLAlchemy still costs about 170 µs of
CPU per execution here (pool checkout, execution context, parameter and result
processing, the greenlet hop), twice what asyncpg needs for the statement itself.
The statements that run for every job (the enqueue, claim and outcome batches) are
therefore compiled by SQLAlchemy once, for the engine's dialect, and executed with
asyncpg directly (which prepares each once and keeps it) on a connection checked out
of SQLAlchemy's pool and held for that one kind of statement.

Everything else stays SQLAlchemy: the SQL is SQLAlchemy's own compilation of the
statements in statements.py, the connection comes from (and goes back to) its pool
with the codecs its dialect installed (JSONB decodes to Python values), and errors
become StorageUnavailableError exactly as on the SQLAlchemy path.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from job_service.storage.errors import storage_errors

# Placeholder for the named parameters when the literal ones are computed at compile time.
_UNSET = object()


class DirectStatement:
    """A SQLAlchemy statement compiled once; `args(params)` gives its positional
    arguments ($1, $2, ...) from the named `p_*` parameters."""

    def __init__(self, statement: Any, dialect: Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        self.sql: str = compiled.string
        self._order: tuple[str, ...] = tuple(compiled.positiontup or ())
        named = {name for name in self._order if name.startswith("p_")}
        # Literal values (e.g. JSON keys) become bound parameters too: fix them now.
        fixed = compiled.construct_params(dict.fromkeys(named, _UNSET))
        self._fixed = {k: v for k, v in fixed.items() if k not in named}
        self._named = named

    def args(self, params: Mapping[str, Any]) -> list[Any]:
        missing = self._named - params.keys()
        if missing:
            raise KeyError(f"missing parameters {sorted(missing)}")
        fixed = self._fixed
        return [params[name] if name in params else fixed[name] for name in self._order]


class HeldConnection:
    """One pooled connection kept for a single kind of statement, used by one
    statement at a time. A statement that finds it busy uses a connection of its
    own from the pool for that once; one that fails (or is cancelled) gives the
    held connection up, so the next starts on a fresh one."""

    def __init__(
        self,
        engine: AsyncEngine,
        session: Sequence[str] = (),
        session_reset: Sequence[str] = (),
    ) -> None:
        """`session`: statements run once on the held connection when it is taken
        (planner settings for its kind of statement); `session_reset` undoes them
        before it goes back to the pool."""
        self._engine = engine
        self._session = tuple(session)
        self._session_reset = tuple(session_reset)
        self._conn: AsyncConnection | None = None
        self._driver: Any = None  # the asyncpg connection under _conn
        self._busy = False

    async def fetch(self, statement: DirectStatement, params: Mapping[str, Any]) -> list[Any]:
        """Run `statement` (committed on return: the connection is in autocommit)
        and return asyncpg's records."""
        args = statement.args(params)
        with storage_errors():
            if self._busy:
                async with self._engine.connect() as conn:
                    driver = await _asyncpg_connection(conn)
                    records: list[Any] = await driver.fetch(statement.sql, *args)
                    return records
            self._busy = True
            try:
                driver = self._driver
                if driver is not None and driver.is_closed():
                    # The database ended it while it was idle (a restart, a kill):
                    # nothing was sent on it, so a fresh one serves this statement.
                    await self._give_up()
                    driver = None
                if driver is None:
                    self._conn = await self._engine.connect()
                    driver = self._driver = await _asyncpg_connection(self._conn)
                    for setting in self._session:
                        await driver.execute(setting)
                records = await driver.fetch(statement.sql, *args)
                return records
            except BaseException:
                await self._give_up()
                raise
            finally:
                self._busy = False

    async def _give_up(self) -> None:
        conn, self._conn, self._driver = self._conn, None, None
        if conn is not None:
            # Broken, or left mid-statement by a cancellation: never reuse it.
            await self._drop(conn)

    @staticmethod
    async def _drop(conn: AsyncConnection) -> None:
        with contextlib.suppress(Exception):
            await asyncio.shield(conn.invalidate())
        with contextlib.suppress(Exception):
            await asyncio.shield(conn.close())

    async def close(self) -> None:
        conn, driver = self._conn, self._driver
        self._conn = self._driver = None
        if conn is None:
            return
        try:
            for reset in self._session_reset:
                await driver.execute(reset)
        except Exception:
            await self._drop(conn)  # not known to be clean: never back in the pool
            return
        with contextlib.suppress(Exception):
            await conn.close()


async def _asyncpg_connection(conn: AsyncConnection) -> Any:
    driver = (await conn.get_raw_connection()).driver_connection
    if driver is None:  # pragma: no cover - a pooled connection always has one
        raise RuntimeError("no driver connection")
    return driver
