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

A connection is never used by two statements at once: a held connection serves one
statement at a time (a lock; a statement that finds it busy uses a connection of its
own for that once), and a connection that failed in any way is dropped, never reused
nor put back in the pool. When the database goes away (a restart), a statement that
had not reached it fails plainly (StorageUnavailableError); one that may have reached
it and committed, with its answer lost, fails with StatementInDoubtError, naming the
server process that ran it so the caller can find out what happened (see
`end_backend`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy import text
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from san_jobs.job_service.domain.errors import StorageUnavailableError
from san_jobs.job_service.storage.errors import describe, refused_before_sending, storage_errors

# Placeholder for the named parameters when the literal ones are computed at compile time.
_UNSET = object()

# asyncpg's client-side "cannot encode this argument" (asyncpg.exceptions.DataError
# is the server's SQLSTATE class 22).
_ClientDataError: type[Exception] = asyncpg.exceptions._base.DataError

# Who ran a statement: (process id, backend_start) of its server process.
_WHO_AM_I = "SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"
# That process, if it still runs: ended, then watched until it is gone.
_THAT_BACKEND = (
    "FROM pg_stat_activity WHERE pid = :pid"
    " AND (CAST(:started AS timestamptz) IS NULL OR backend_start = :started)"
)
_END_BACKEND = text(f"SELECT pg_terminate_backend(pid) {_THAT_BACKEND}")
_BACKEND_RUNS = text(f"SELECT count(*) {_THAT_BACKEND}")
END_BACKEND_WAIT = 5.0  # seconds

# A statement refused before it was sent, on a connection the database ended while it
# sat in the pool (a restart terminates every idle connection: asyncpg may still be
# consuming the server's goodbye, "cannot switch to state 15; another operation (2)
# is in progress"), is tried on another connection, at most this many in all.
DEAD_CONNECTION_TRIES = 4

# Connections being dropped (see _drop).
_DROPPING: set[asyncio.Future[None]] = set()


@dataclass(frozen=True, slots=True)
class Backend:
    """One server process: `started` tells it apart from a later one given the same
    pid (None when not known)."""

    pid: int
    started: datetime | None = None


class StatementInDoubtError(StorageUnavailableError):
    """The connection failed after the statement may have reached the database: it may
    or may not have committed. Once `end_backend(engine, error.backend)` returns, its
    fate is settled and can be read."""

    def __init__(self, message: str, backend: Backend | None) -> None:
        super().__init__(message)
        self.backend = backend


async def end_backend(engine: AsyncEngine, backend: Backend | None) -> None:
    """Make sure `backend` no longer runs (ending it if it does): after that, whatever
    it was doing has committed or rolled back for good. StorageUnavailableError if
    the database cannot be asked or the process outlives END_BACKEND_WAIT. (A role
    may end its own sessions: the process ran a statement of this same engine.)"""
    if backend is None:
        return
    params = {"pid": backend.pid, "started": backend.started}
    loop = asyncio.get_running_loop()
    give_up_at = loop.time() + END_BACKEND_WAIT
    with storage_errors():
        async with engine.connect() as conn:
            await conn.execute(_END_BACKEND, params)
            while (await conn.execute(_BACKEND_RUNS, params)).scalar_one():
                if loop.time() > give_up_at:
                    raise StorageUnavailableError(
                        f"database unavailable: server process {backend.pid} still runs"
                    )
                await asyncio.sleep(0.05)


def _session_lives_on(exc: BaseException) -> bool:
    """True when the server answered that the statement failed and the session lives
    on (severity ERROR): its transaction was rolled back, the connection is idle and
    sound. A FATAL error ends the session, possibly after a commit whose answer it
    replaces."""
    return isinstance(exc, asyncpg.PostgresError) and getattr(exc, "severity", None) == "ERROR"


def _failed_for_sure(exc: BaseException) -> bool:
    """True when the statement certainly did not commit: the server said so, or it
    was refused before it was sent (an argument asyncpg could not encode)."""
    return (
        _session_lives_on(exc) or refused_before_sending(exc) or isinstance(exc, _ClientDataError)
    )


def _unavailable(exc: BaseException, backend: Backend | None) -> StorageUnavailableError | None:
    """The error to raise for a failed statement, or None to let storage_errors()
    classify it (errors the server gave for the statement, e.g. its data)."""
    if not isinstance(exc, Exception):
        return None  # a cancellation: the caller is gone
    if _failed_for_sure(exc):
        if isinstance(exc, asyncpg.exceptions.InternalClientError):
            return StorageUnavailableError(f"database unavailable: {describe(exc)}")
        return None
    return StatementInDoubtError(f"database unavailable: {describe(exc)}", backend)


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
    statement at a time. A statement that finds it busy (or closed) uses a connection
    of its own from the pool for that once; one that fails (or is cancelled) gives
    the held connection up, so the next starts on a fresh one, unless the server
    refused the statement itself (e.g. for its data) and the session is sound."""

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
        self._backend: Backend | None = None  # the server process behind _driver
        # Held while a statement (or close()) uses _conn: never two at once.
        self._lock = asyncio.Lock()
        self._closed = False

    async def fetch(self, statement: DirectStatement, params: Mapping[str, Any]) -> list[Any]:
        """Run `statement` (committed on return: the connection is in autocommit)
        and return asyncpg's records. StatementInDoubtError when the connection
        failed after the statement may have reached the database."""
        args = statement.args(params)
        if self._lock.locked() or self._closed:
            return await self._fetch_once(statement.sql, args)
        # An unlocked asyncio.Lock is taken without yielding: nobody slips in.
        async with self._lock:
            return await self._fetch_held(statement.sql, args)

    async def _fetch_held(self, sql: str, args: list[Any]) -> list[Any]:
        for attempt in range(1, DEAD_CONNECTION_TRIES + 1):
            with storage_errors():
                driver = self._driver
                if driver is not None and driver.is_closed():
                    # The database ended it while it was idle (a restart, a kill):
                    # nothing was sent on it, so a fresh one serves this statement.
                    await self._give_up()
                    driver = None
                if driver is None:
                    driver = await self._take()
                try:
                    records: list[Any] = await driver.fetch(sql, *args)
                    return records
                except BaseException as exc:
                    backend = self._backend
                    if not _session_lives_on(exc):
                        await self._give_up()
                    if attempt < DEAD_CONNECTION_TRIES and refused_before_sending(exc):
                        continue  # a dead connection, caught before use: another one
                    error = _unavailable(exc, backend)
                    if error is None:
                        raise
                    raise error from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _take(self) -> Any:
        """Check a connection out of the pool and prepare it for its statements."""
        for attempt in range(1, DEAD_CONNECTION_TRIES + 1):
            conn = await self._engine.connect()
            try:
                driver = await _asyncpg_connection(conn)
                for setting in self._session:
                    await driver.execute(setting)
                row = await driver.fetchrow(_WHO_AM_I)
            except BaseException as exc:
                await _drop(conn)
                if attempt < DEAD_CONNECTION_TRIES and refused_before_sending(exc):
                    continue  # a pooled connection the database ended: another one
                raise
            self._conn, self._driver = conn, driver
            self._backend = Backend(row["pid"], row["backend_start"]) if row else None
            return driver
        raise AssertionError("unreachable")  # pragma: no cover

    async def _fetch_once(self, sql: str, args: list[Any]) -> list[Any]:
        """`sql` on a connection of its own, back to the pool only if all went well;
        a pooled connection the database ended (refused before sending) is dropped
        and another one tried."""
        for attempt in range(1, DEAD_CONNECTION_TRIES + 1):
            try:
                return await self._fetch_on_new(sql, args)
            except StorageUnavailableError as error:
                if attempt == DEAD_CONNECTION_TRIES or not refused_before_sending(
                    error.__cause__ or error
                ):
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def _fetch_on_new(self, sql: str, args: list[Any]) -> list[Any]:
        with storage_errors():
            conn = await self._engine.connect()
            backend: Backend | None = None
            try:
                driver = await _asyncpg_connection(conn)
                backend = Backend(driver.get_server_pid())
                records: list[Any] = await driver.fetch(sql, *args)
            except BaseException as exc:
                if _session_lives_on(exc):
                    await conn.close()
                else:
                    await _drop(conn)  # broken, or busy with the statement: never reused
                error = _unavailable(exc, backend)
                if error is None:
                    raise
                raise error from exc
            await conn.close()
            return records

    async def _give_up(self) -> None:
        conn, self._conn, self._driver, self._backend = self._conn, None, None, None
        if conn is not None:
            # Broken, or left mid-statement by a cancellation: never reuse it.
            await _drop(conn)

    async def close(self) -> None:
        """Give the held connection back to the pool (its session settings undone),
        once the statement running on it, if any, has finished."""
        self._closed = True  # from now on, statements use a connection of their own
        async with self._lock:
            conn, driver = self._conn, self._driver
            self._conn = self._driver = self._backend = None
            if conn is None:
                return
            try:
                for reset in self._session_reset:
                    await driver.execute(reset)
            except BaseException as exc:
                await _drop(conn)  # not known to be clean: never back in the pool
                if not isinstance(exc, Exception):
                    raise
                return
            with contextlib.suppress(Exception):
                await conn.close()


async def _drop(conn: AsyncConnection) -> None:
    """Invalidate `conn` (its socket is closed, the pool forgets it) and check it in,
    to the end even if the caller is cancelled meanwhile."""

    async def drop() -> None:
        with contextlib.suppress(Exception):
            await conn.invalidate()
        with contextlib.suppress(Exception):
            await conn.close()

    task = asyncio.ensure_future(drop())
    _DROPPING.add(task)  # the loop keeps only a weak reference to a task
    task.add_done_callback(_DROPPING.discard)
    await asyncio.shield(task)


async def _asyncpg_connection(conn: AsyncConnection) -> Any:
    driver = (await conn.get_raw_connection()).driver_connection
    if driver is None:  # pragma: no cover - a pooled connection always has one
        raise RuntimeError("no driver connection")
    return driver
