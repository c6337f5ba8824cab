"""Dependencies in the store (domain/dependencies.py says the rules): the Enqueue of a
job with depends_on, and what a waiting job waits on. The merge of their results at
its first claim, and the last-resort end of a chain, are the worker's
(worker_store.py). What ends a dependency's dependents is migration 0017's trigger,
in the statement that ends the dependency.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import and_, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from san_jobs.job_service.domain.dependencies import (
    DEPENDS_ON_FIELD,
    WAITING,
    dependency_problem,
    depth_problem,
    failure_message,
)
from san_jobs.job_service.domain.errors import (
    FieldViolation,
    InvalidRequestError,
    StorageUnavailableError,
)
from san_jobs.job_service.domain.job_ids import new_job_id
from san_jobs.job_service.domain.model import (
    TERMINAL_STATUSES,
    Job,
    JobStatus,
    JobType,
    NewJob,
    OnDuplicate,
)
from san_jobs.job_service.domain.transitions import CANCELLED_CODE
from san_jobs.job_service.storage.connections import Connections
from san_jobs.job_service.storage.enqueue_conflicts import (
    CONFLICT_TRIES,
    KEPT_CONFLICTING,
    conflict_answer,
    enqueue_row,
)
from san_jobs.job_service.storage.errors import sqlstate
from san_jobs.job_service.storage.rows import chunks
from san_jobs.job_service.storage.statements import Statements
from san_jobs.job_service.storage.tables import async_jobs, job_dependencies
from san_jobs.job_service.storage.transition_sql import time_params

_jobs = async_jobs.c
_deps = job_dependencies.c
# error_reason of a dependent its dependency ended (the trigger writes the same).
DEPENDENCY_ENDED_REASON = "DEPENDENCY_ENDED"


# SQLSTATEs of a transaction the database rolled back whole (deadlock_detected,
# serialization_failure): safe to write again.
_ROLLED_BACK = frozenset({"40P01", "40001"})


def ended_by(message: str, now: datetime) -> dict[str, Any]:
    """The columns of a dependent its dependency ended: CANCELLED, `message` ("Dependency
    <id> FAILED|CANCELLED") as its reason, as migration 0017's trigger writes them."""
    return {
        "status": JobStatus.CANCELLED.value,
        "cancelled_at": now,
        "updated_at": now,
        "next_attempt_at": None,
        "due_at": None,
        "cancel_reason": message,
        "error_message": message,
        "error_code": CANCELLED_CODE,
        "error_reason": DEPENDENCY_ENDED_REASON,
    }


class _Conflict(Exception):
    """The INSERT met a job holding the request_id or the active target: rolled back."""


class DependentEnqueue:
    """The Enqueue of a job with depends_on (job_commands.SqlJobCommands sends it here)."""

    def __init__(self, *, db: Connections, sql: Statements, now: Callable[[], datetime]) -> None:
        self._db = db
        self._sql = sql
        self._now = now

    async def enqueue(self, new: NewJob, on_duplicate: OnDuplicate) -> tuple[Job, bool]:
        """One transaction: mark the dependencies (has_dependents, which also locks
        their rows, so none ends unseen meanwhile), check them (each the caller's, of
        a type this job takes), insert the job waiting for those not COMPLETED, its
        job_dependencies rows, and end it at once if one already FAILED or was
        CANCELLED. A request_id or active target already held: answered as any
        Enqueue's conflict (`conflict_answer`)."""
        for attempt in range(CONFLICT_TRIES):
            try:
                return await self._insert_dependent(new), False
            except _Conflict:
                pass
            except StorageUnavailableError as error:
                # Rolled back whole by the database (a deadlock with a writer that
                # locks in another order, a serialization failure): nothing of it was
                # stored, so it is written again here rather than failing the call.
                if sqlstate(error) not in _ROLLED_BACK or attempt == CONFLICT_TRIES - 1:
                    raise
                await asyncio.sleep(random.uniform(0.005, 0.02) * (attempt + 1))
                continue
            async with self._db.single() as conn:
                winner = await conflict_answer(self._db, self._sql, conn, new, on_duplicate)
            if winner is not None:
                return winner
        raise StorageUnavailableError(KEPT_CONFLICTING)

    async def _insert_dependent(self, new: NewJob) -> Job:
        now = self._now()
        job_id = new_job_id()
        async with self._db.tx() as conn:
            found, depth = await self._mark_dependencies(conn, new)
            left = [d for d in new.depends_on if found[d][1] is not JobStatus.COMPLETED]
            # One FAILED or CANCELLED already: the job is made and ended at once.
            ended = next(((d, found[d][1]) for d in left if found[d][1] in TERMINAL_STATUSES), None)
            row = enqueue_row(job_id, new)
            if left:
                row["not_before"] = WAITING
            params = time_params(now) | self._sql.enqueue_params.bind(**row)
            if not (await conn.execute(self._sql.enqueue, params)).first():
                raise _Conflict
            await conn.execute(
                update(async_jobs)
                .where(_jobs.id == job_id)
                .values(
                    depends_on=list(new.depends_on),
                    dependencies_left=len(left),
                    dependency_depth=depth,
                )
            )
            await conn.execute(
                insert(job_dependencies),
                [
                    {"job_id": job_id, "depends_on_id": d, "position": i}
                    for i, d in enumerate(new.depends_on)
                ],
            )
            if ended is not None:
                await conn.execute(
                    update(async_jobs)
                    .where(_jobs.id == job_id)
                    .values(**ended_by(failure_message(*ended), now))
                )
            job = await self._job_in(conn, job_id)
        return replace(job, waiting_on=tuple(left) if ended is None else ())

    async def _mark_dependencies(
        self, conn: AsyncConnection, new: NewJob
    ) -> tuple[dict[str, tuple[JobType, JobStatus]], int]:
        """Set has_dependents on the dependencies the caller may name (its tenant's),
        locking them; their (type, status), and the new job's depth in its chain. A
        missing one, one of a type this job does not take, or one already
        MAX_DEPENDENCY_DEPTH deep: InvalidRequestError naming depends_on[i] (rolled
        back)."""
        found: dict[str, tuple[JobType, JobStatus]] = {}
        depths: dict[str, int] = {}
        ordered = sorted(new.depends_on)
        # Every dependent's transaction locks its dependencies in one order, by id:
        # two enqueues naming the same jobs in other orders wait for each other
        # instead of deadlocking (on PostgreSQL; SQLite writes one at a time).
        for chunk in chunks(ordered):
            await conn.execute(
                select(_jobs.id)
                .where(and_(_jobs.id.in_(list(chunk)), _jobs.tenant == new.tenant))
                .order_by(_jobs.id)
                .with_for_update()
            )
        for chunk in chunks(ordered):
            marked = await conn.execute(
                update(async_jobs)
                .where(and_(_jobs.id.in_(list(chunk)), _jobs.tenant == new.tenant))
                .values(has_dependents=True)
                .returning(_jobs.id, _jobs.job_type, _jobs.status, _jobs.dependency_depth)
            )
            for job_id, job_type, status, depth in marked:
                found[job_id] = (JobType(job_type), JobStatus(status))
                depths[job_id] = depth or 0
        out: list[FieldViolation] = []
        for index, dependency_id in enumerate(new.depends_on):
            field = f"{DEPENDS_ON_FIELD}[{index}]"
            if dependency_id not in found:
                # Another caller's job reads as an unknown one: nothing is learned.
                out.append(FieldViolation(field, f"no job {dependency_id}"))
                continue
            problem = dependency_problem(new.job_type, found[dependency_id][0]) or depth_problem(
                dependency_id, depths[dependency_id]
            )
            if problem is not None:
                out.append(FieldViolation(field, problem))
        if out:
            raise InvalidRequestError(out)
        return found, 1 + max(depths.values(), default=0)

    async def _job_in(self, conn: AsyncConnection, job_id: str) -> Job:
        jobs = await self._db.jobs(conn, self._sql.by_id, {"p_id": job_id})
        return jobs[0]
