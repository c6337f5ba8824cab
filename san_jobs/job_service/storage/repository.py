"""SqlJobStore: the JobStore port on `async_jobs`, made of its parts.

Each port of domain/ports.py is a plain field, a class of its own file:

- `commands` (job_commands.SqlJobCommands): Enqueue, BatchEnqueue, cancel,
  RetryFailed (a job with depends_on: dependencies.py);
- `queries` (job_queries.SqlJobQueries): reads, stats, usage, failure groups;
- `worker` (worker_store.SqlWorkerStore): the claim, leases, outcomes;
- `pauses` (pauses.SqlPauseStore): the dispatch pauses;
- `retention` (prune.SqlRetentionStore): the pruner's counts, deletes and lock;
- `schedules` (schedules.SqlScheduleStore): schedules and the firing of their periods
  (a period's job enqueued by `commands`, in the firing round's transaction);
- `changes` (changes.SqlChangeStore): the change feed's positions, reads, retention.

What each write does is declared in domain/transitions.py and compiled to SQL once per
store (statements.py, transition_sql.py; the compiled text is checked in under sql/);
reads' SQL is in queries.py. On PostgreSQL the same statement also sends the change
notification. Timestamps come from the injected clock, never from the database, so
tests can move time.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from sqlalchemy import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from san_jobs.job_service.domain.transitions import LEASE_EXPIRED_CODE, LEASE_EXPIRED_MESSAGE
from san_jobs.job_service.storage.batching import MAX_BATCH
from san_jobs.job_service.storage.changes import SqlChangeStore
from san_jobs.job_service.storage.connections import Connections, HotStatements
from san_jobs.job_service.storage.job_commands import SqlJobCommands
from san_jobs.job_service.storage.job_queries import SqlJobQueries
from san_jobs.job_service.storage.pauses import SqlPauseStore
from san_jobs.job_service.storage.ping import DatabasePing
from san_jobs.job_service.storage.prune import SqlRetentionStore
from san_jobs.job_service.storage.rows import aware, utc_now
from san_jobs.job_service.storage.schedules import SqlScheduleStore
from san_jobs.job_service.storage.statements import Statements
from san_jobs.job_service.storage.worker_store import SqlWorkerStore

__all__ = ["LEASE_EXPIRED_CODE", "LEASE_EXPIRED_MESSAGE", "MAX_BATCH", "SqlJobStore", "utc_now"]

MAX_INSTANCE_ID_BYTES = 200


class SqlJobStore:
    """JobStore on SQLAlchemy 2 async: SQLite (aiosqlite, WAL) or PostgreSQL (asyncpg).

    On PostgreSQL every write that changes jobs also sends `pg_notify('san_jobs', ...)`
    in the same statement or transaction (see notify.py), naming `instance_id` as its
    origin."""

    def __init__(
        self,
        database: AsyncEngine | str | URL,
        *,
        instance_id: str = "local",
        clock: Callable[[], datetime] = utc_now,
        pool_size: int = 10,
        max_overflow: int = 10,
        enqueue_interval: float = 0.0,
    ) -> None:
        """`database` is an engine (the store disposes of it on close) or a URL
        (sqlite[+aiosqlite]:///path or postgresql[+asyncpg]://...).
        `enqueue_interval`: under load, the shortest time between two enqueue
        commits (batching.GroupCommit's min_interval)."""
        if "|" in instance_id or len(instance_id.encode()) > MAX_INSTANCE_ID_BYTES:
            raise ValueError(f"instance_id: no '|', at most {MAX_INSTANCE_ID_BYTES} bytes")
        self._instance_id = instance_id
        self._clock = clock
        self._db = Connections(database, pool_size=pool_size, max_overflow=max_overflow)
        self._sql = Statements(self._db.pg, instance_id)
        self._hot = HotStatements.of(self._sql, self._db)
        self.queries = SqlJobQueries(db=self._db, sql=self._sql, now=self._now)
        # The rows an outcome or an in-doubt enqueue left unknown are read back here.
        read_many = self.queries.get_many
        self.worker = SqlWorkerStore(
            db=self._db, sql=self._sql, hot=self._hot, now=self._now, read_many=read_many
        )
        self.pauses = SqlPauseStore(db=self._db, sql=self._sql, now=self._now)
        self.retention = SqlRetentionStore(self._db)
        self.commands = SqlJobCommands(
            db=self._db,
            sql=self._sql,
            hot=self._hot,
            now=self._now,
            read_many=read_many,
            enqueue_interval=enqueue_interval,
        )
        self.schedules = SqlScheduleStore(db=self._db, commands=self.commands, now=self._now)
        self.changes = SqlChangeStore(self._db)
        self._database_ping = DatabasePing(self._db.engine)

    @property
    def engine(self) -> AsyncEngine:
        return self._db.engine

    @property
    def instance_id(self) -> str:
        return self._instance_id

    def _now(self) -> datetime:
        return aware(self._clock())

    async def close(self) -> None:
        await self.commands.wait_idle()
        await self.worker.wait_idle()
        await self._database_ping.close()
        await self._hot.close()
        await self._db.close()

    async def ping(self) -> None:
        await self._database_ping.ping()
