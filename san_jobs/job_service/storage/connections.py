"""The store's connections: engines, autocommit, and the hot statements' own ones.

A single statement is its own transaction, so a hot-path call is one round trip
(PostgreSQL) or one statement (SQLite): those run on autocommit connections. The
few multi-statement operations (retry_failed) take a transaction (`tx`). On
PostgreSQL the statements that run for every job are executed directly on asyncpg
(direct.py), each kind on a connection held for it (`HotStatement`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from san_jobs.job_service.domain.model import Job
from san_jobs.job_service.storage.direct import DirectStatement, HeldConnection
from san_jobs.job_service.storage.engine import SQLITE_BEGIN_OPTION, create_engine
from san_jobs.job_service.storage.errors import storage_errors
from san_jobs.job_service.storage.rows import row_to_job
from san_jobs.job_service.storage.statements import HOT_SESSION, HOT_SESSION_RESET, Statements


class Connections:
    """The engines of one store: `single()` for statements that commit on their
    own, `tx()` for a multi-statement transaction."""

    def __init__(
        self, database: AsyncEngine | str | URL, *, pool_size: int, max_overflow: int
    ) -> None:
        """`database` is an engine (disposed of on close) or a URL."""
        self._engines: list[AsyncEngine] = []
        if isinstance(database, AsyncEngine):
            self.engine = database
        else:
            self.engine = create_engine(database, pool_size=pool_size, max_overflow=max_overflow)
        self._engines.append(self.engine)
        self.pg = self.engine.dialect.name == "postgresql"
        # No BEGIN/COMMIT: a single statement is its own transaction.
        self.autocommit: AsyncEngine
        if not self.pg:
            self.autocommit = self.engine.execution_options(**{SQLITE_BEGIN_OPTION: "NONE"})
        elif isinstance(database, AsyncEngine):
            self.autocommit = self.engine.execution_options(isolation_level="AUTOCOMMIT")
        else:
            # PostgreSQL from a URL: a pool of its own whose connections stay in
            # autocommit (switching one per checkout costs ~40% more CPU per statement).
            # The transactional pool above then only opens the few connections the
            # multi-statement operations (retry_failed) use.
            self.autocommit = create_engine(
                database, pool_size=pool_size, max_overflow=max_overflow, autocommit=True
            )
            self._engines.append(self.autocommit)

    @asynccontextmanager
    async def tx(self) -> AsyncIterator[AsyncConnection]:
        """One multi-statement write transaction (BEGIN IMMEDIATE on SQLite)."""
        with storage_errors():
            async with self.engine.connect() as conn:
                if not self.pg:
                    await conn.execution_options(**{SQLITE_BEGIN_OPTION: "IMMEDIATE"})
                async with conn.begin():
                    yield conn

    @asynccontextmanager
    async def single(self) -> AsyncIterator[AsyncConnection]:
        """A connection whose statements each commit on their own (reads, and writes
        that are one atomic statement)."""
        with storage_errors():
            async with self.autocommit.connect() as conn:
                yield conn

    @staticmethod
    async def jobs(conn: AsyncConnection, stmt: Any, params: dict[str, Any]) -> list[Job]:
        result = await conn.execute(stmt, params)
        return [row_to_job(row) for row in result.mappings()]

    async def write(self, stmt: Any, params: dict[str, Any]) -> list[Job]:
        """One statement on its own connection, committed on return: its jobs."""
        async with self.single() as conn:
            return await self.jobs(conn, stmt, params)

    async def close(self) -> None:
        for engine in self._engines:
            await engine.dispose()


class HotStatement:
    """One statement that runs for every job: through SQLAlchemy, or on PostgreSQL
    directly on asyncpg (`direct`), on a connection held for it (`held`), or shared
    with `shares`' (statements that never run at the same time: one connection less)."""

    def __init__(
        self, statement: Any, connections: Connections, shares: HotStatement | None = None
    ) -> None:
        self.statement = statement
        self._connections = connections
        self.direct: DirectStatement | None = None
        self.held: HeldConnection | None = None
        if connections.pg:
            self.direct = DirectStatement(statement, connections.autocommit.dialect)
            self.held = (
                shares.held
                if shares is not None
                else HeldConnection(connections.autocommit, HOT_SESSION, HOT_SESSION_RESET)
            )

    async def rows(self, params: dict[str, Any]) -> list[Any]:
        """Run it (committed on return); its rows, by column name."""
        if self.direct is not None and self.held is not None:
            return await self.held.fetch(self.direct, params)
        async with self._connections.single() as conn:
            return list((await conn.execute(self.statement, params)).mappings())

    async def jobs(self, params: dict[str, Any]) -> list[Job]:
        return [row_to_job(row) for row in await self.rows(params)]

    async def close(self) -> None:
        if self.held is not None:
            await self.held.close()


@dataclass(frozen=True, slots=True)
class HotStatements:
    """The statements that run for every job, by name."""

    enqueue_many: HotStatement
    claim: HotStatement
    claim_urgent: HotStatement
    complete_many: HotStatement
    fail_many: HotStatement
    renew_leases: HotStatement

    @classmethod
    def of(cls, sql: Statements, connections: Connections) -> HotStatements:
        def hot(statement: Any) -> HotStatement:
            return HotStatement(statement, connections)

        claim = hot(sql.claim)
        return cls(
            enqueue_many=hot(sql.enqueue_many),
            claim=claim,
            # The two claim orders (domain/priorities.py) take turns in one producer:
            # one held connection serves both (closing it twice is harmless).
            claim_urgent=HotStatement(sql.claim_urgent, connections, shares=claim),
            complete_many=hot(sql.complete_many),
            fail_many=hot(sql.fail_many),
            renew_leases=hot(sql.renew_leases),
        )

    async def close(self) -> None:
        for field in fields(self):
            statement: HotStatement = getattr(self, field.name)
            await statement.close()
