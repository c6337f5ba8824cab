"""Dependencies in the store (domain/dependencies.py says the rules): the Enqueue of a
job with depends_on, the merge of their results at its first claim, and what a
waiting job waits on. What ends a dependency's dependents is migration 0017's
trigger, in the statement that ends the dependency.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import and_, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from san_jobs.job_service.domain.dependencies import (
    DEPENDS_ON_FIELD,
    TAKES_RESULTS,
    WAITING,
    Finished,
    dependency_problem,
    depth_problem,
    failure_message,
    merged_input,
)
from san_jobs.job_service.domain.errors import (
    FieldViolation,
    InvalidRequestError,
    LeaseLostError,
    StorageUnavailableError,
)
from san_jobs.job_service.domain.job_ids import new_job_id
from san_jobs.job_service.domain.model import (
    TERMINAL_STATUSES,
    Claim,
    Job,
    JobStatus,
    JobType,
    NewJob,
    OnDuplicate,
)
from san_jobs.job_service.domain.ports import FailParams
from san_jobs.job_service.domain.transitions import CANCELLED_CODE
from san_jobs.job_service.storage.errors import sqlstate
from san_jobs.job_service.storage.rows import chunks
from san_jobs.job_service.storage.tables import async_jobs, job_dependencies
from san_jobs.job_service.storage.transition_sql import Rows, time_params
from san_jobs.job_service.storage.writes import (
    CONFLICT_TRIES,
    KEPT_CONFLICTING,
    JobWrites,
    conflict_answer,
    enqueue_row,
)

_jobs = async_jobs.c
_deps = job_dependencies.c
# error_reason of a dependent its dependency ended (the trigger writes the same).
DEPENDENCY_ENDED_REASON = "DEPENDENCY_ENDED"


# SQLSTATEs of a transaction the database rolled back whole (deadlock_detected,
# serialization_failure): safe to write again.
_ROLLED_BACK = frozenset({"40P01", "40001"})


def _ended_by(message: str, now: datetime) -> dict[str, Any]:
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


class JobDependencies(JobWrites):
    async def _enqueue_with_dependencies(
        self, new: NewJob, on_duplicate: OnDuplicate
    ) -> tuple[Job, bool]:
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
                    .values(**_ended_by(failure_message(*ended), now))
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

    # -- results flow -------------------------------------------------------------------

    async def _merge_inputs(self, claims: list[Claim]) -> list[Claim]:
        """Claims of jobs that take their dependencies' results and have not had them
        yet get them now: the merged input is written as the job's input (while the
        claim still owns it), so every later attempt sends the same."""
        out: list[Claim] = []
        for claim in claims:
            job = claim.job
            if job.depends_on and job.inputs_merged_at is None and job.job_type in TAKES_RESULTS:
                claim = await self._merge_one(claim)
            out.append(claim)
        return out

    async def _merge_one(self, claim: Claim) -> Claim:
        job, now = claim.job, self._now()
        async with self._db.single() as conn:
            rows = await conn.execute(
                select(
                    _jobs.id, _jobs.job_type, _jobs.completed_at, _jobs.result, _jobs.request_params
                ).where(and_(_jobs.id.in_(list(job.depends_on)), _jobs.status == "COMPLETED"))
            )
            finished = [
                Finished(
                    job_id=row.id,
                    job_type=JobType(row.job_type),
                    completed_at=row.completed_at,
                    result=row.result or {},
                    input=row.request_params or {},
                )
                for row in rows
            ]
            params = merged_input(job.job_type, job.request_params, finished)
            await conn.execute(
                update(async_jobs)
                .where(and_(_jobs.id == job.id, _jobs.claim_token == claim.token))
                .values(request_params=params, inputs_merged_at=now)
            )
        return Claim(
            job=replace(job, request_params=params, inputs_merged_at=now), token=claim.token
        )

    # -- an end the trigger could not write --------------------------------------------

    async def end_unsettled(self, params: FailParams) -> list[Job]:
        """FAILED with `params.failure`, written without the trigger of 0017: its
        has_dependents is cleared first (an UPDATE not of status fires nothing), the
        failure written by the same statement as any failed attempt's, then its waiting
        dependents, and theirs, CANCELLED one level per statement (`_end_dependents`),
        all in one transaction. For a job whose outcome could not be written (a chain
        deeper than the trigger's recursion allows, stored before the depth bound; any
        other refusal): the job ends, visibly, instead of being claimed again forever.
        The job first, then the dependents ended; LeaseLostError if `params.token` no
        longer owns it."""
        now, job_id = self._now(), params.job_id
        failure = params.failure
        async with self._db.tx() as conn:
            owned = (
                await conn.execute(
                    select(_jobs.has_dependents).where(
                        and_(_jobs.id == job_id, _jobs.claim_token == params.token)
                    )
                )
            ).first()
            if owned is None:
                raise LeaseLostError(job_id)
            await conn.execute(
                update(async_jobs).where(_jobs.id == job_id).values(has_dependents=False)
            )
            row = self._sql.fail_rows.row(
                at=now,
                job_id=job_id,
                token=params.token,
                code=failure.code,
                reason=failure.reason,
                message=failure.message,
                usage=None if failure.usage is None else failure.usage.to_json(),
                retry_at=None,
            )
            await conn.execute(self._sql.fail_many, Rows.param([row]))
            ended = await self._end_dependents(conn, job_id, now) if owned[0] else []
            by_id: dict[str, Job] = {}
            for chunk in chunks([job_id, *ended]):
                jobs = await self._db.jobs(conn, self._sql.by_ids, {"p_ids": list(chunk)})
                by_id.update((job.id, job) for job in jobs)
        return [by_id[i] for i in (job_id, *ended) if i in by_id]

    async def _end_dependents(
        self, conn: AsyncConnection, root_id: str, now: datetime
    ) -> list[str]:
        """Cancel the waiting dependents of `root_id` (FAILED), and theirs, as the
        trigger would ("Dependency <id> FAILED|CANCELLED", each naming the job it
        waited for), one level per round and without recursion: each is written with
        has_dependents cleared, so the trigger does not fire for it. Their ids."""
        ended: list[str] = []
        frontier = {root_id: JobStatus.FAILED}
        while frontier:
            parent_of: dict[str, str] = {}
            for chunk in chunks(list(frontier)):
                rows = await conn.execute(
                    select(_deps.job_id, _deps.depends_on_id)
                    .join(async_jobs, _jobs.id == _deps.job_id)
                    .where(
                        and_(
                            _deps.depends_on_id.in_(list(chunk)),
                            _jobs.status == JobStatus.PENDING.value,
                            _jobs.dependencies_left > 0,
                        )
                    )
                )
                for dependent_id, dependency_id in rows:
                    parent_of.setdefault(dependent_id, dependency_id)
            by_parent: dict[str, list[str]] = {}
            for dependent_id, dependency_id in parent_of.items():
                by_parent.setdefault(dependency_id, []).append(dependent_id)
            for dependency_id, dependents in by_parent.items():
                message = failure_message(dependency_id, frontier[dependency_id])
                for chunk in chunks(dependents):
                    await conn.execute(
                        update(async_jobs)
                        .where(and_(_jobs.id.in_(list(chunk)), _jobs.status == "PENDING"))
                        .values(has_dependents=False, **_ended_by(message, now))
                    )
            ended += parent_of
            frontier = dict.fromkeys(parent_of, JobStatus.CANCELLED)
        return ended

    # -- reads --------------------------------------------------------------------------

    async def with_waiting_on(self, jobs: Sequence[Job]) -> list[Job]:
        """`jobs` with `waiting_on` filled in for those waiting for dependencies: one
        query for all of them (none when no job waits)."""
        waiting = [job.id for job in jobs if job.waits_for_dependencies]
        if not waiting:
            return list(jobs)
        open_ones: dict[str, list[tuple[int, str]]] = {}
        async with self._db.single() as conn:
            for chunk in chunks(waiting):
                rows = await conn.execute(
                    select(_deps.job_id, _deps.depends_on_id, _deps.position)
                    .join(async_jobs, _jobs.id == _deps.depends_on_id)
                    .where(and_(_deps.job_id.in_(list(chunk)), _jobs.status != "COMPLETED"))
                )
                for job_id, dependency_id, position in rows:
                    open_ones.setdefault(job_id, []).append((position, dependency_id))
        return [
            replace(job, waiting_on=tuple(d for _, d in sorted(open_ones[job.id])))
            if job.id in open_ones
            else job
            for job in jobs
        ]

    async def dependents_moved_by(self, job_ids: Sequence[str]) -> list[str]:
        """The dependents that the end of `job_ids` moved, in the statement that ended
        them (the trigger writes the ended job's updated_at into each): now due, or
        CANCELLED. Not those it only counted down (still waiting for others): with
        100 jobs ending that 1,000 others all wait for, each end loaded all 1,000."""
        dependent, ended = async_jobs.alias("dependent"), async_jobs.alias("ended")
        found: list[str] = []
        async with self._db.single() as conn:
            for chunk in chunks(list(job_ids)):
                rows = await conn.execute(
                    select(_deps.job_id)
                    .join(dependent, dependent.c.id == _deps.job_id)
                    .join(ended, ended.c.id == _deps.depends_on_id)
                    .where(
                        and_(
                            _deps.depends_on_id.in_(list(chunk)),
                            dependent.c.updated_at == ended.c.updated_at,
                            or_(
                                dependent.c.status != JobStatus.PENDING.value,
                                dependent.c.dependencies_left == 0,
                            ),
                        )
                    )
                    .distinct()
                )
                found += [row[0] for row in rows]
        return found
