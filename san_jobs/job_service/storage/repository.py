"""SqlJobStore: the JobStore port on `async_jobs`, composed of its concerns.

- connections.py: engines, autocommit, the hot statements' direct asyncpg runners;
- writes.py: enqueue and the worker's writes, coalesced into batches;
- reads.py: one job, many, a page;
- operations.py: cancel, RetryFailed, stats, next_due_at.

What each write does is declared in domain/transitions.py and compiled to SQL once per
store (statements.py, transition_sql.py); reads' SQL is in queries.py. On PostgreSQL
the same statement also sends the change notification. Timestamps come from the
injected clock, never from the database, so tests can move time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime

from sqlalchemy import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from san_jobs.job_service.domain.claim_limits import LimitedClaim, TypeLimit
from san_jobs.job_service.domain.dispatch import DispatchPause, PauseReason
from san_jobs.job_service.domain.failure_groups import FailureGroup, FailureQuery
from san_jobs.job_service.domain.model import (
    AttemptUsage,
    Claim,
    Failure,
    Job,
    JobFilter,
    JobStats,
    JobStatus,
    JobType,
    JsonDict,
    NewJob,
    OnDuplicate,
    RetryOutcome,
)
from san_jobs.job_service.domain.ports import EnqueueOutcome
from san_jobs.job_service.domain.transitions import LEASE_EXPIRED_CODE, LEASE_EXPIRED_MESSAGE
from san_jobs.job_service.domain.usage import UsageQuery, UsageTotal
from san_jobs.job_service.storage.claim_limits import LimitedClaims
from san_jobs.job_service.storage.connections import Connections, HotStatements
from san_jobs.job_service.storage.failure_groups import failure_groups
from san_jobs.job_service.storage.operations import OperatorQueries
from san_jobs.job_service.storage.pauses import PauseQueries
from san_jobs.job_service.storage.ping import DatabasePing
from san_jobs.job_service.storage.prune import PruneQueries
from san_jobs.job_service.storage.reads import JobReads
from san_jobs.job_service.storage.rows import aware, utc_now
from san_jobs.job_service.storage.statements import Statements
from san_jobs.job_service.storage.writes import MAX_BATCH, JobWrites

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
        sql = Statements(self._db.pg, instance_id)
        self._hot = HotStatements.of(sql, self._db)
        self._reads = JobReads(self._db, sql)
        self._writes = JobWrites(
            self._db,
            sql,
            self._hot,
            self._now,
            self._reads.get_many,
            enqueue_interval=enqueue_interval,
        )
        self._operations = OperatorQueries(self._db, sql, self._now)
        self._pauses = PauseQueries(self._db, sql, self._now)
        self._limited = LimitedClaims(self._db, sql, self._now)
        self._ping = DatabasePing(self._db.engine)
        self._prune = PruneQueries(self._db)

    @property
    def engine(self) -> AsyncEngine:
        return self._db.engine

    @property
    def instance_id(self) -> str:
        return self._instance_id

    def _now(self) -> datetime:
        return aware(self._clock())

    async def close(self) -> None:
        await self._writes.wait_idle()
        await self._ping.close()
        await self._hot.close()
        await self._db.close()

    async def ping(self) -> None:
        await self._ping.ping()

    # -- JobStore: writes -------------------------------------------------------------

    async def enqueue(self, new: NewJob, on_duplicate: OnDuplicate) -> tuple[Job, bool]:
        return await self._writes.enqueue(new, on_duplicate)

    async def enqueue_many(
        self, items: Sequence[tuple[NewJob, OnDuplicate]]
    ) -> list[EnqueueOutcome]:
        return await self._writes.enqueue_many(items)

    async def claim(
        self,
        limit: int,
        lease_seconds: float,
        *,
        skip_types: frozenset[JobType] = frozenset(),
        only_type: JobType | None = None,
        max_per_caller: int | None = None,
    ) -> list[Claim]:
        return await self._writes.claim(
            limit,
            lease_seconds,
            skip_types=skip_types,
            only_type=only_type,
            max_per_caller=max_per_caller,
        )

    async def claim_limited(
        self,
        job_type: JobType,
        limit: int,
        lease_seconds: float,
        type_limit: TypeLimit,
        max_per_caller: int | None = None,
    ) -> LimitedClaim:
        return await self._limited.claim_limited(
            job_type, limit, lease_seconds, type_limit, max_per_caller
        )

    async def fail_exhausted_leases(self) -> list[Job]:
        return await self._writes.fail_exhausted_leases()

    async def renew_leases(
        self, leases: Sequence[tuple[str, str]], lease_seconds: float
    ) -> set[str]:
        return await self._writes.renew_leases(leases, lease_seconds)

    async def complete(
        self,
        job_id: str,
        token: str,
        result: JsonDict,
        usage: AttemptUsage | None = None,
        *,
        claimed: Job | None = None,
    ) -> Job:
        return await self._writes.complete(job_id, token, result, usage, claimed=claimed)

    async def fail(
        self,
        job_id: str,
        token: str,
        failure: Failure,
        retry_at: datetime | None,
        *,
        claimed: Job | None = None,
    ) -> Job:
        return await self._writes.fail(job_id, token, failure, retry_at, claimed=claimed)

    async def release(self, job_id: str, token: str) -> Job | None:
        return await self._writes.release(job_id, token)

    # -- JobStore: reads --------------------------------------------------------------

    async def get(self, job_id: str) -> Job:
        return await self._reads.get(job_id)

    async def get_many(self, job_ids: Sequence[str]) -> list[Job]:
        return await self._reads.get_many(job_ids)

    async def list_jobs(
        self, job_filter: JobFilter, page_size: int, page_token: str | None
    ) -> tuple[list[Job], str | None]:
        return await self._reads.list_jobs(job_filter, page_size, page_token)

    # -- JobStore: operators ----------------------------------------------------------

    async def cancel(self, job_id: str, reason: str, owner: str | None = None) -> Job:
        return await self._operations.cancel(job_id, reason, owner)

    async def retry_failed(
        self, job_filter: JobFilter, limit: int, dry_run: bool, extra_attempts: int
    ) -> RetryOutcome:
        return await self._operations.retry_failed(job_filter, limit, dry_run, extra_attempts)

    async def stats(self) -> JobStats:
        return await self._operations.stats()

    async def fold_counts(self) -> int:
        return await self._operations.fold_counts()

    async def next_due_at(self) -> datetime | None:
        return await self._operations.next_due_at()

    async def usage_totals(
        self, query: UsageQuery, max_groups: int
    ) -> tuple[list[UsageTotal], bool]:
        return await self._operations.usage_totals(query, max_groups)

    async def failure_groups(
        self, query: FailureQuery, max_groups: int
    ) -> tuple[list[FailureGroup], bool]:
        return await failure_groups(self._db, query, max_groups)

    # -- JobStore: dispatch pauses ------------------------------------------------------

    async def dispatch_pauses(self) -> list[DispatchPause]:
        return await self._pauses.dispatch_pauses()

    async def open_pause(
        self,
        job_type: JobType,
        reason: PauseReason,
        until: datetime,
        last_error: str,
        instance_id: str,
    ) -> DispatchPause:
        return await self._pauses.open_pause(job_type, reason, until, last_error, instance_id)

    async def close_pause(self, job_type: JobType) -> bool:
        return await self._pauses.close_pause(job_type)

    async def take_probe(self, job_type: JobType, next_probe_at: datetime) -> bool:
        return await self._pauses.take_probe(job_type, next_probe_at)

    # -- JobStore: retention (prune.py) -------------------------------------------------

    async def count_prunable(
        self, cutoffs: Mapping[JobStatus, datetime], limit: int
    ) -> dict[JobStatus, int]:
        return await self._prune.count_prunable(cutoffs, limit)

    async def prune_batch(self, status: JobStatus, cutoff: datetime, limit: int) -> int:
        return await self._prune.prune_batch(status, cutoff, limit)

    def prune_lock(self) -> AbstractAsyncContextManager[bool]:
        return self._prune.prune_lock()
