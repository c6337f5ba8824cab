"""Retention on the database: count and delete terminal jobs past their cutoff.

Every statement walks ix_async_jobs_terminal_end, (status, updated_at) over terminal
rows only (tables.py, migration 0010): a batch or a count is one index range scan that
stops at its LIMIT, however big the table, and never touches active rows.

- A batch is one DELETE on an autocommit connection, so one short transaction:
  `DELETE ... WHERE id IN (SELECT id ... ORDER BY updated_at LIMIT n) AND status = s
  AND updated_at < cutoff` (PostgreSQL: `id = ANY(ARRAY(SELECT ... FOR UPDATE SKIP
  LOCKED))`, see prune_batch_statement). The outer WHERE repeats the
  status and the age, so a row that changed after the subquery chose it (RetryFailed
  moving a FAILED job back to PENDING) is left alone. SKIP LOCKED: a row another
  transaction holds (RetryFailed, a concurrent prune) is skipped rather than waited
  for, so a prune never queues behind, or holds up, anyone.
- A count is `SELECT count(*) FROM (SELECT 1 ... LIMIT n)`: an index range count that
  stops at n.
- The lock: PostgreSQL's session advisory lock, taken with pg_try_advisory_lock on a
  connection held for the whole run (the batches run on other connections). If that
  connection dies, PostgreSQL drops the lock with it; two prunes overlapping then is
  harmless (SKIP LOCKED and the re-check delete each row once).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime

from sqlalchemy import (
    ColumnElement,
    Delete,
    Select,
    and_,
    any_,
    delete,
    false,
    func,
    or_,
    select,
    text,
)
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection

from san_jobs.job_service.domain.model import ACTIVE_STATUSES, TERMINAL_STATUSES, JobStatus
from san_jobs.job_service.domain.ports import CountPrunableParams, PruneBatchParams
from san_jobs.job_service.storage.connections import Connections
from san_jobs.job_service.storage.errors import storage_errors
from san_jobs.job_service.storage.tables import async_jobs, job_dependencies

log = logging.getLogger("job_service.storage.prune")

# Any constant, unlike migrate.py's: instances take turns pruning.
PRUNE_LOCK_KEY = 0x5A4E_5052

_jobs = async_jobs.c


def _terminal(status: JobStatus) -> JobStatus:
    if status not in TERMINAL_STATUSES:
        # A caller's bug: pruning an active status would delete live work.
        raise ValueError(f"only terminal jobs are pruned, not {status.value}")
    return status


# A finished job an active job still depends on stays (its result is that job's
# input at its first claim). Only a job with has_dependents pays for the look.
_DEPENDENTS = job_dependencies.c
_dependent = async_jobs.alias("dependent")
_AWAITED = (
    select(text("1"))
    .select_from(job_dependencies.join(_dependent, _dependent.c.id == _DEPENDENTS.job_id))
    .where(
        _DEPENDENTS.depends_on_id == _jobs.id,
        _dependent.c.status.in_([s.value for s in ACTIVE_STATUSES]),
    )
    .exists()
)


def _past(status: JobStatus, cutoff: datetime) -> list[ColumnElement[bool]]:
    return [
        _jobs.status == _terminal(status).value,
        _jobs.updated_at < cutoff,
        or_(_jobs.has_dependents.is_(false()), ~_AWAITED),
    ]


def prune_batch_statement(status: JobStatus, cutoff: datetime, limit: int, pg: bool) -> Delete:
    """Delete up to `limit` jobs of `status` that ended before `cutoff`, oldest first."""
    chosen = select(_jobs.id).where(*_past(status, cutoff)).order_by(_jobs.updated_at).limit(limit)
    if not pg:
        return delete(async_jobs).where(and_(_jobs.id.in_(chosen), *_past(status, cutoff)))
    # `id = ANY(ARRAY(subquery))`, not `id IN (subquery)`: the array is computed once
    # (an InitPlan), then found by primary key. With IN, the planner may join the
    # subquery to a scan of every row the outer re-check matches, all of them when
    # most of the table is past retention.
    ids = func.array(chosen.with_for_update(skip_locked=True).scalar_subquery())
    return delete(async_jobs).where(and_(_jobs.id == any_(ids), *_past(status, cutoff)))


def count_past_statement(status: JobStatus, cutoff: datetime, limit: int) -> Select[int]:
    """How many jobs of `status` ended before `cutoff`, counting at most `limit`."""
    capped = select(text("1")).select_from(async_jobs).where(*_past(status, cutoff)).limit(limit)
    return select(func.count()).select_from(capped.subquery())


class SqlRetentionStore:
    """The retention port (domain/ports.RetentionStore) on `async_jobs`."""

    def __init__(self, db: Connections) -> None:
        self._db = db

    async def count_prunable(self, params: CountPrunableParams) -> dict[JobStatus, int]:
        counts: dict[JobStatus, int] = {}
        async with self._db.single() as conn:
            for status, cutoff in params.cutoffs.items():
                statement = count_past_statement(status, cutoff, max(0, params.limit))
                counts[status] = int((await conn.execute(statement)).scalar_one())
        return counts

    async def prune_batch(self, params: PruneBatchParams) -> int:
        statement = prune_batch_statement(
            params.status, params.cutoff, max(0, params.limit), self._db.pg
        )
        async with self._db.single() as conn:
            result = await conn.execute(statement)
        return int(result.rowcount)

    @asynccontextmanager
    async def prune_lock(self) -> AsyncIterator[bool]:
        if not self._db.pg:
            # SQLite serves one instance by design; the pruner keeps its own runs apart.
            yield True
            return
        with storage_errors():
            conn = await self._db.autocommit.connect()
        try:
            with storage_errors():
                taken = bool(
                    (
                        await conn.execute(
                            text("SELECT pg_try_advisory_lock(:key)"), {"key": PRUNE_LOCK_KEY}
                        )
                    ).scalar_one()
                )
            yield taken
            if taken:
                await conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": PRUNE_LOCK_KEY})
        except BaseException:
            # A pooled connection must never go back still holding the lock: an
            # unlock that did not happen (cancelled, connection lost) closes it instead.
            await _discard(conn)
            raise
        finally:
            await conn.close()


async def _discard(conn: AsyncConnection) -> None:
    try:
        await conn.invalidate()
    except (SQLAlchemyError, OSError) as error:  # already gone: nothing holds the lock
        log.debug("closing the prune lock's connection: %s", error)
