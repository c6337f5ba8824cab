"""SqlJobStore: the one class that reads and writes `async_jobs` (the JobStore port).

Every hot-path write is one atomic `UPDATE/INSERT ... RETURNING` statement, claim
included, run without BEGIN/COMMIT round trips (statements.py builds them once).
Concurrent enqueues, completions and failures are coalesced (batching.py): the calls
waiting at the same time share ONE statement over a JSON array of rows, and each
caller returns only after that statement committed, with its own row's outcome. The
attempt history is a JSON list on the row, edited in SQL in that same statement, so a
batch claim or an outcome never needs a read first. On PostgreSQL the same statement
also sends the change notification. Timestamps come from the injected clock, never
from the database, so tests can move time.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import URL, ColumnElement, RowMapping, and_, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from job_service.domain.errors import (
    DuplicateJobError,
    InvalidJobStateError,
    JobNotFoundError,
    LeaseLostError,
    StorageError,
    StorageUnavailableError,
)
from job_service.domain.model import (
    Claim,
    Failure,
    Job,
    JobAttempt,
    JobCount,
    JobFilter,
    JobStats,
    JobStatus,
    JobType,
    JsonDict,
    NewJob,
    OnDuplicate,
    RetryOutcome,
)
from job_service.domain.page_token import decode_page_token, encode_page_token
from job_service.storage.batching import Coalescer
from job_service.storage.direct import DirectStatement, HeldConnection, StatementInDoubtError
from job_service.storage.engine import SQLITE_BEGIN_OPTION, create_engine
from job_service.storage.errors import storage_errors
from job_service.storage.in_doubt import EnqueueInDoubtError, InsertInDoubt
from job_service.storage.statements import (
    ACTIVE,
    HOT_SESSION,
    HOT_SESSION_RESET,
    IS_FAILED,
    IS_PENDING,
    LEASE_EXPIRED_CODE,
    LEASE_EXPIRED_MESSAGE,
    JsonRows,
    Statements,
    json_text,
)
from job_service.storage.tables import async_jobs

__all__ = ["LEASE_EXPIRED_CODE", "LEASE_EXPIRED_MESSAGE", "SqlJobStore", "utc_now"]

t = async_jobs

_CHUNK = 1_000  # ids per IN (...) list
# Rows per group-commit statement (enqueue, complete, fail).
MAX_BATCH = 500
# The statements that run for every job: on PostgreSQL they run directly on asyncpg
# (direct.py), each kind on a connection of its own.
HOT_STATEMENTS = ("enqueue_many", "claim", "complete_many", "fail_many", "renew_leases")
MAX_INSTANCE_ID_BYTES = 200


def _refused_for_its_data(error: StorageError) -> bool:
    """A statement refused for the data of some row (a CHECK, a too-long value, as
    classified by storage/errors.py): in a batch, each row is then written alone so
    only its own caller hears of it. Not for connection trouble: a batch that may
    have committed is never written again."""
    return not isinstance(error, StorageUnavailableError)


# fail(): job id, claim token, time of the call, failure, retry_at.
_FailItem = tuple[str, str, datetime, Failure, datetime | None]


def utc_now() -> datetime:
    return datetime.now(UTC)


def _aware(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"naive datetime: {value!r}")
    return value.astimezone(UTC)


def _row_to_job(row: RowMapping) -> Job:
    attempts = row["attempts"] or []
    return Job(
        id=row["id"],
        job_type=JobType(row["job_type"]),
        status=JobStatus(row["status"]),
        target_id=row["target_id"],
        request_params=row["request_params"] or {},
        requested_by=row["requested_by"],
        request_id=row["request_id"],
        result=row["result"],
        error_message=row["error_message"],
        error_code=row["error_code"],
        error_reason=row["error_reason"],
        attempt_count=row["attempt_count"],
        max_attempts=row["max_attempts"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        started_at=row["started_at"],
        completed_at=row["completed_at"],
        failed_at=row["failed_at"],
        cancelled_at=row["cancelled_at"],
        cancel_reason=row["cancel_reason"],
        next_attempt_at=row["next_attempt_at"],
        lease_expires_at=row["lease_expires_at"],
        claim_token=row["claim_token"],
        attempts=tuple(JobAttempt.from_json(a) for a in attempts),
    )


def _pending_job(job_id: str, new: NewJob, now: datetime) -> Job:
    """The row an enqueue inserts, as a Job (what RETURNING * would give back)."""
    return Job(
        id=job_id,
        job_type=new.job_type,
        status=JobStatus.PENDING,
        target_id=new.target_id,
        request_params=new.request_params,
        requested_by=new.requested_by,
        request_id=new.request_id,
        result=None,
        error_message=None,
        error_code=None,
        error_reason=None,
        attempt_count=0,
        max_attempts=new.max_attempts,
        created_at=now,
        updated_at=now,
        started_at=None,
        completed_at=None,
        failed_at=None,
        cancelled_at=None,
        cancel_reason=None,
        next_attempt_at=None,
        lease_expires_at=None,
        claim_token=None,
        attempts=(),
    )


def _chunks(items: Sequence[str], size: int = _CHUNK) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


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
        commits (batching.Coalescer's min_interval)."""
        if "|" in instance_id or len(instance_id.encode()) > MAX_INSTANCE_ID_BYTES:
            raise ValueError(f"instance_id: no '|', at most {MAX_INSTANCE_ID_BYTES} bytes")
        self._engines: list[AsyncEngine] = []
        if isinstance(database, AsyncEngine):
            self._engine = database
        else:
            self._engine = create_engine(database, pool_size=pool_size, max_overflow=max_overflow)
        self._engines.append(self._engine)
        self._instance_id = instance_id
        self._clock = clock
        self._pg = self._engine.dialect.name == "postgresql"
        self._sql = Statements(self._pg, instance_id)
        # No BEGIN/COMMIT: a single statement is its own transaction, so a hot-path
        # call is one round trip (PostgreSQL) or one statement (SQLite).
        self._autocommit: AsyncEngine
        if not self._pg:
            self._autocommit = self._engine.execution_options(**{SQLITE_BEGIN_OPTION: "NONE"})
        elif isinstance(database, AsyncEngine):
            self._autocommit = self._engine.execution_options(isolation_level="AUTOCOMMIT")
        else:
            # PostgreSQL from a URL: a pool of its own whose connections stay in
            # autocommit (switching one per checkout costs ~40% more CPU per statement).
            # The transactional pool above then only opens the few connections the
            # multi-statement operations (retry_failed) use.
            self._autocommit = create_engine(
                database, pool_size=pool_size, max_overflow=max_overflow, autocommit=True
            )
            self._engines.append(self._autocommit)
        self._direct: dict[str, tuple[DirectStatement, HeldConnection]] = {}
        if self._pg:
            dialect = self._autocommit.dialect
            self._direct = {
                name: (
                    DirectStatement(getattr(self._sql, name), dialect),
                    HeldConnection(self._autocommit, HOT_SESSION, HOT_SESSION_RESET),
                )
                for name in HOT_STATEMENTS
            }
        # Group commit of the hot-path writes: concurrent calls share one statement.
        self._enqueues: Coalescer[NewJob, Job | None] = Coalescer(
            self._enqueue_batch, max_batch=MAX_BATCH, name="enqueue", min_interval=enqueue_interval
        )
        self._completes: Coalescer[tuple[str, str, datetime, JsonDict], Job | None] = Coalescer(
            self._complete_batch, max_batch=MAX_BATCH, name="complete", key=lambda i: i[0]
        )
        self._fails: Coalescer[_FailItem, Job | None] = Coalescer(
            self._fail_batch, max_batch=MAX_BATCH, name="fail", key=lambda i: i[0]
        )

    @property
    def engine(self) -> AsyncEngine:
        return self._engine

    @property
    def is_postgres(self) -> bool:
        return self._pg

    @property
    def instance_id(self) -> str:
        return self._instance_id

    async def close(self) -> None:
        for coalescer in (self._enqueues, self._completes, self._fails):
            await coalescer.wait_idle()
        for _, connection in self._direct.values():
            await connection.close()
        for engine in self._engines:
            await engine.dispose()

    # -- plumbing -------------------------------------------------------------------

    def _now(self) -> datetime:
        return _aware(self._clock())

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[AsyncConnection]:
        """One multi-statement write transaction (BEGIN IMMEDIATE on SQLite)."""
        with storage_errors():
            async with self._engine.connect() as conn:
                if not self._pg:
                    await conn.execution_options(**{SQLITE_BEGIN_OPTION: "IMMEDIATE"})
                async with conn.begin():
                    yield conn

    @asynccontextmanager
    async def _single(self) -> AsyncIterator[AsyncConnection]:
        """A connection whose statements each commit on their own (reads, and writes
        that are one atomic statement)."""
        with storage_errors():
            async with self._autocommit.connect() as conn:
                yield conn

    async def _jobs(self, conn: AsyncConnection, stmt: Any, params: dict[str, Any]) -> list[Job]:
        result = await conn.execute(stmt, params)
        return [_row_to_job(row) for row in result.mappings()]

    async def _write(self, stmt: Any, params: dict[str, Any]) -> list[Job]:
        async with self._single() as conn:
            return await self._jobs(conn, stmt, params)

    async def _hot(self, name: str, params: dict[str, Any]) -> list[Any]:
        """Run one of HOT_STATEMENTS: directly on asyncpg (PostgreSQL), else through
        SQLAlchemy. Its rows, by column name."""
        direct = self._direct.get(name)
        if direct is not None:
            statement, connection = direct
            return await connection.fetch(statement, params)
        async with self._single() as conn:
            return list((await conn.execute(getattr(self._sql, name), params)).mappings())

    async def _hot_jobs(self, name: str, params: dict[str, Any]) -> list[Job]:
        return [_row_to_job(row) for row in await self._hot(name, params)]

    def _times(self, lease_seconds: float = 0.0) -> dict[str, Any]:
        now = self._now()
        return {
            "p_now": now,
            "p_now_iso": now.isoformat(),
            "p_until": now + timedelta(seconds=lease_seconds),
        }

    # -- enqueue and reads ----------------------------------------------------------

    async def enqueue(self, new: NewJob, on_duplicate: OnDuplicate) -> tuple[Job, bool]:
        # Concurrent enqueues share one INSERT (group commit); the future resolves
        # after that statement committed. A row the unique indexes refused (a
        # request_id repeat, an active duplicate, also one within the same batch) is
        # then resolved alone, exactly as a single enqueue would be.
        try:
            inserted = await self._enqueues.submit(new)
        except EnqueueInDoubtError as doubt:
            # The INSERT's answer was lost: the caller hears OK or UNAVAILABLE only
            # once it is known which is true (see in_doubt.py).
            return await doubt.settle(), False
        if inserted is not None:
            return inserted, False
        return await self._enqueue_one(new, on_duplicate)

    async def _enqueue_batch(self, batch: list[NewJob]) -> list[Job | BaseException | None]:
        """One INSERT ... ON CONFLICT DO NOTHING RETURNING id for the whole batch. Ids
        are made here, so the returned ids map back to their items; None = not
        inserted; an EnqueueInDoubtError each when the answer was lost. An inserted
        row holds exactly what was sent, so its Job is built here rather than decoded
        from the database."""
        ids = [str(uuid.uuid4()) for _ in batch]
        rows = [
            {
                "job_id": job_id,
                "job_type": new.job_type.value,
                "target_id": new.target_id,
                "params": json_text(new.request_params),
                "requested_by": new.requested_by,
                "request_id": new.request_id,
                "max_attempts": new.max_attempts,
            }
            for job_id, new in zip(ids, batch, strict=True)
        ]
        times = self._times()
        try:
            written = await self._hot("enqueue_many", times | {"p_rows": json_text(rows)})
            inserted = {row["id"] for row in written}
        except StatementInDoubtError as error:
            doubt = InsertInDoubt(self._autocommit, error.backend, ids, self.get_many)
            return [EnqueueInDoubtError(job_id, doubt, error) for job_id in ids]
        except StorageError as error:
            if len(batch) > 1 and _refused_for_its_data(error):
                return [None] * len(batch)  # each alone: only the bad one fails
            raise
        now: datetime = times["p_now"]
        return [
            _pending_job(job_id, new, now) if job_id in inserted else None
            for job_id, new in zip(ids, batch, strict=True)
        ]

    async def _write_rows(self, name: str, rows: list[dict[str, Any]]) -> dict[str, Job]:
        """Run the JsonRows statement `name` for `rows` (one statement, committed on
        return); the rows it wrote, by id."""
        params = self._times() | {"p_rows": json_text(rows)}
        return {job.id: job for job in await self._hot_jobs(name, params)}

    async def _outcome_rows(
        self, name: str, ids: list[str], rows: list[dict[str, Any]]
    ) -> list[Job | BaseException | None]:
        """The outcome statement `name` for a batch; per row the job written, or None (the token
        no longer owns it). If the data of some row is refused, each row alone."""
        try:
            written = await self._write_rows(name, rows)
        except StorageError as error:
            if len(rows) == 1 or not _refused_for_its_data(error):
                raise
            results: list[Job | BaseException | None] = []
            for job_id, row in zip(ids, rows, strict=True):
                try:
                    results.append((await self._write_rows(name, [row])).get(job_id))
                except StorageError as row_error:
                    results.append(row_error)
            return results
        return [written.get(job_id) for job_id in ids]

    async def _enqueue_one(self, new: NewJob, on_duplicate: OnDuplicate) -> tuple[Job, bool]:
        now = self._now()
        params: dict[str, Any] = {f"p_{c.name}": None for c in t.c}
        params |= {
            "p_id": str(uuid.uuid4()),
            "p_job_type": new.job_type.value,
            "p_status": JobStatus.PENDING.value,
            "p_target_id": new.target_id,
            "p_request_params": new.request_params,
            "p_requested_by": new.requested_by,
            "p_request_id": new.request_id,
            "p_attempt_count": 0,
            "p_max_attempts": new.max_attempts,
            "p_attempts": [],
            "p_created_at": now,
            "p_updated_at": now,
            "p_due_at": now,
        }
        sql = self._sql
        # ON CONFLICT DO NOTHING: the unique indexes stop duplicates without an error;
        # the winner is then read. If it left the active states in between, nothing
        # conflicts any more: insert again.
        for _ in range(5):
            async with self._single() as conn:
                inserted = await self._jobs(conn, sql.enqueue, params)
                if inserted:
                    return inserted[0], False
                if new.request_id is not None:
                    same = await self._jobs(
                        conn, sql.by_request_id, {"p_request_id": new.request_id}
                    )
                    if same:
                        return same[0], True
                active = await self._jobs(
                    conn,
                    sql.active_for_target,
                    {"p_job_type": new.job_type.value, "p_target_id": new.target_id},
                )
                if active:
                    if on_duplicate is OnDuplicate.RETURN_EXISTING:
                        return active[0], True
                    raise DuplicateJobError(active[0].id)
        raise StorageUnavailableError("enqueue kept conflicting with jobs that changed state")

    async def get(self, job_id: str) -> Job:
        async with self._single() as conn:
            jobs = await self._jobs(conn, self._sql.by_id, {"p_id": job_id})
        if not jobs:
            raise JobNotFoundError(job_id)
        return jobs[0]

    async def get_many(self, job_ids: Sequence[str]) -> list[Job]:
        unique_ids = list(dict.fromkeys(job_ids))
        found: dict[str, Job] = {}
        async with self._single() as conn:
            for chunk in _chunks(unique_ids):
                for job in await self._jobs(conn, self._sql.by_ids, {"p_ids": list(chunk)}):
                    found[job.id] = job
        return [found[i] for i in unique_ids if i in found]

    def _filter(self, job_filter: JobFilter) -> list[ColumnElement[bool]]:
        conds: list[ColumnElement[bool]] = []
        f = job_filter
        if f.requested_by is not None:
            conds.append(t.c.requested_by == f.requested_by)
        if f.job_ids:
            conds.append(t.c.id.in_(list(f.job_ids)))
        if f.statuses:
            conds.append(t.c.status.in_([s.value for s in f.statuses]))
        if f.job_types:
            conds.append(t.c.job_type.in_([jt.value for jt in f.job_types]))
        if f.target_ids:
            conds.append(t.c.target_id.in_(list(f.target_ids)))
        if f.error_message_contains:
            needle = f.error_message_contains
            conds.append(t.c.error_message.contains(needle, autoescape=True))
            if not self._pg:
                # SQLite's LIKE ignores ASCII case; PostgreSQL's does not. Be exact on both.
                conds.append(func.instr(t.c.error_message, needle) > 0)
        if f.created_after is not None:
            conds.append(t.c.created_at >= _aware(f.created_after))
        if f.created_before is not None:
            conds.append(t.c.created_at < _aware(f.created_before))
        if f.failed_after is not None:
            conds.append(t.c.failed_at >= _aware(f.failed_after))
        if f.failed_before is not None:
            conds.append(t.c.failed_at < _aware(f.failed_before))
        return conds

    async def list_jobs(
        self, job_filter: JobFilter, page_size: int, page_token: str | None
    ) -> tuple[list[Job], str | None]:
        page_size = max(1, page_size)
        conds = self._filter(job_filter)
        if page_token:
            created, last_id = decode_page_token(page_token)
            conds.append(
                or_(t.c.created_at < created, and_(t.c.created_at == created, t.c.id < last_id))
            )
        stmt = (
            select(t)
            .where(*conds)
            .order_by(t.c.created_at.desc(), t.c.id.desc())
            .limit(page_size + 1)
        )
        async with self._single() as conn:
            jobs = await self._jobs(conn, stmt, {})
        if len(jobs) <= page_size:
            return jobs, None
        jobs = jobs[:page_size]
        return jobs, encode_page_token(jobs[-1].created_at, jobs[-1].id)

    # -- the worker's writes --------------------------------------------------------

    async def claim(self, limit: int, lease_seconds: float) -> list[Claim]:
        if limit <= 0:
            return []
        jobs = await self._hot_jobs("claim", self._times(lease_seconds) | {"p_limit": limit})
        jobs.sort(key=lambda j: (j.created_at, j.id))
        return [Claim(job=j, token=j.claim_token or "") for j in jobs]

    async def fail_exhausted_leases(self) -> list[Job]:
        return await self._write(self._sql.fail_exhausted_leases, self._times())

    async def renew_lease(self, job_id: str, token: str, lease_seconds: float) -> bool:
        return job_id in await self.renew_leases([(job_id, token)], lease_seconds)

    async def renew_leases(
        self, leases: Sequence[tuple[str, str]], lease_seconds: float
    ) -> set[str]:
        owned: set[str] = set()
        for start in range(0, len(leases), MAX_BATCH):
            rows = [{"job_id": i, "token": tok} for i, tok in leases[start : start + MAX_BATCH]]
            params = self._times(lease_seconds) | {"p_rows": json_text(rows)}
            owned.update(row["id"] for row in await self._hot("renew_leases", params))
        return owned

    async def complete(self, job_id: str, token: str, result: JsonDict) -> Job:
        # Concurrent completions share one UPDATE; each row keeps its token check.
        job = await self._completes.submit((job_id, token, self._now(), result))
        if job is None:
            raise LeaseLostError(job_id)
        return job

    async def _complete_batch(
        self, batch: list[tuple[str, str, datetime, JsonDict]]
    ) -> list[Job | BaseException | None]:
        rows_format: JsonRows = self._sql.complete_rows
        rows = [
            {
                "job_id": job_id,
                "token": token,
                "at": rows_format.time(at),
                "at_iso": at.isoformat(),
                "result": json_text(result),
            }
            for job_id, token, at, result in batch
        ]
        return await self._outcome_rows("complete_many", [b[0] for b in batch], rows)

    async def fail(
        self, job_id: str, token: str, failure: Failure, retry_at: datetime | None
    ) -> Job:
        if retry_at is not None:
            retry_at = _aware(retry_at)
        job = await self._fails.submit((job_id, token, self._now(), failure, retry_at))
        if job is None:
            raise LeaseLostError(job_id)
        return job

    async def _fail_batch(self, batch: list[_FailItem]) -> list[Job | BaseException | None]:
        rows_format: JsonRows = self._sql.fail_rows
        rows = [
            {
                "job_id": job_id,
                "token": token,
                "at": rows_format.time(at),
                "at_iso": at.isoformat(),
                "code": failure.code,
                "reason": failure.reason,
                "message": failure.message,
                "retry_at": rows_format.time(retry_at),
            }
            for job_id, token, at, failure, retry_at in batch
        ]
        return await self._outcome_rows("fail_many", [b[0] for b in batch], rows)

    async def release(self, job_id: str, token: str) -> Job | None:
        params = self._times() | {"p_id": job_id, "p_token": token}
        jobs = await self._write(self._sql.release, params)
        return jobs[0] if jobs else None

    # -- operators ------------------------------------------------------------------

    async def cancel(self, job_id: str, reason: str, owner: str | None = None) -> Job:
        params = self._times() | {
            "p_id": job_id,
            "p_cancel_reason": reason,
            "p_cancel_message": f"Cancelled: {reason}" if reason else "Cancelled",
        }
        statement = self._sql.cancel
        if owner is not None:
            statement, params = self._sql.cancel_owned, params | {"p_owner": owner}
        async with self._single() as conn:
            jobs = await self._jobs(conn, statement, params)
            if jobs:
                return jobs[0]
            current = await self._jobs(conn, self._sql.by_id, {"p_id": job_id})
        if not current or (owner is not None and current[0].requested_by != owner):
            raise JobNotFoundError(job_id)  # another's job does not exist for this caller
        raise InvalidJobStateError(
            job_id, current[0].status.value, "only PENDING or PROCESSING jobs can be cancelled"
        )

    async def retry_failed(
        self, job_filter: JobFilter, limit: int, dry_run: bool, extra_attempts: int
    ) -> RetryOutcome:
        now = self._now()
        candidates_stmt = (
            select(t.c.id, t.c.job_type, t.c.target_id)
            .where(IS_FAILED, *self._filter(job_filter))
            .order_by(t.c.failed_at, t.c.id)
            .limit(max(0, limit))
        )
        if self._pg and not dry_run:
            # Concurrent callers split the FAILED jobs between them instead of queueing
            # on each other's row locks (or deadlocking on lock order).
            candidates_stmt = candidates_stmt.with_for_update(skip_locked=True)
        async with self._single() if dry_run else self._tx() as conn:
            candidates = [
                (r.id, r.job_type, r.target_id) for r in await conn.execute(candidates_stmt)
            ]
            active = await self._active_by_target(conn, {c[2] for c in candidates})
            to_move: list[str] = []
            skipped: list[tuple[str, str]] = []
            for job_id, job_type, target_id in candidates:
                holder = active.get((job_type, target_id))
                if holder is not None:
                    skipped.append((job_id, _active_reason(holder)))
                else:
                    # Two FAILED jobs of one target: the first (oldest failure) goes.
                    active[(job_type, target_id)] = job_id
                    to_move.append(job_id)
            if dry_run or not to_move:
                return RetryOutcome(len(candidates), tuple(to_move), tuple(skipped))
            values: dict[str, Any] = {
                "status": JobStatus.PENDING.value,
                "max_attempts": t.c.attempt_count + max(1, extra_attempts),
                "failed_at": None,
                "next_attempt_at": None,
                "due_at": now,
                "updated_at": now,
            }
            moved = await self._move_failed(conn, to_move, values, skipped)
        moved_ids = {job.id for job in moved}
        retried = tuple(i for i in to_move if i in moved_ids)
        for job_id in to_move:
            if job_id not in moved_ids and all(s[0] != job_id for s in skipped):
                skipped.append((job_id, "no longer FAILED: another call retried it"))
        return RetryOutcome(len(candidates), retried, tuple(skipped))

    async def _active_by_target(
        self, conn: AsyncConnection, target_ids: set[str]
    ) -> dict[tuple[str, str], str]:
        found: dict[tuple[str, str], str] = {}
        for chunk in _chunks(sorted(target_ids)):
            stmt = select(t.c.id, t.c.job_type, t.c.target_id).where(
                ACTIVE, t.c.target_id.in_(chunk)
            )
            for row in await conn.execute(stmt):
                found[(row.job_type, row.target_id)] = row.id
        return found

    async def _move_failed(
        self,
        conn: AsyncConnection,
        job_ids: list[str],
        values: dict[str, Any],
        skipped: list[tuple[str, str]],
    ) -> list[Job]:
        """FAILED -> PENDING for `job_ids` (only those still FAILED). If an active job
        appeared since the pre-check, the unique index refuses the batch: then job by
        job, each in a savepoint, skipping the refused ones."""
        moved: list[Job] = []
        try:
            async with conn.begin_nested():
                for chunk in _chunks(job_ids):
                    stmt = update(t).where(t.c.id.in_(chunk), IS_FAILED).values(**values)
                    moved.extend(await self._jobs(conn, self._sql.returning(stmt), {}))
            return moved
        except IntegrityError:
            moved = []
        for job_id in job_ids:
            stmt = update(t).where(t.c.id == job_id, IS_FAILED).values(**values)
            try:
                async with conn.begin_nested():
                    moved.extend(await self._jobs(conn, self._sql.returning(stmt), {}))
            except IntegrityError:
                holder = await self._active_holder(conn, job_id)
                skipped.append((job_id, _active_reason(holder or "unknown")))
        return moved

    async def _active_holder(self, conn: AsyncConnection, job_id: str) -> str | None:
        """The id of the active job holding the (job_type, target_id) slot of `job_id`."""
        job = await self._jobs(conn, self._sql.by_id, {"p_id": job_id})
        if not job:
            return None
        params = {"p_job_type": job[0].job_type.value, "p_target_id": job[0].target_id}
        holders = await self._jobs(conn, self._sql.active_for_target, params)
        return holders[0].id if holders else None

    async def stats(self) -> JobStats:
        counts_stmt = select(t.c.job_type, t.c.status, func.count()).group_by(
            t.c.job_type, t.c.status
        )
        oldest_stmt = select(func.min(t.c.created_at)).where(ACTIVE, IS_PENDING)
        async with self._single() as conn:
            rows = (await conn.execute(counts_stmt)).all()
            oldest = (await conn.execute(oldest_stmt)).scalar_one_or_none()
        counts = tuple(
            sorted(
                (JobCount(JobType(jt), JobStatus(st), int(n)) for jt, st, n in rows),
                key=lambda c: (c.job_type.value, c.status.value),
            )
        )
        return JobStats(counts=counts, oldest_pending_created_at=_as_utc(oldest))

    async def next_due_at(self) -> datetime | None:
        stmt = select(func.min(t.c.due_at)).where(ACTIVE)
        async with self._single() as conn:
            value = (await conn.execute(stmt)).scalar_one_or_none()
        return _as_utc(value)


def _active_reason(holder_id: str) -> str:
    return f"an active job exists for this job type and target: {holder_id}"


def _as_utc(value: Any) -> datetime | None:
    """Aggregates (min) lose the column type on SQLite: parse and mark as UTC."""
    if value is None:
        return None
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
