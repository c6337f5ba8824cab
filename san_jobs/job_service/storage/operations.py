"""Operators' queries: cancel, RetryFailed, stats, usage, and when the next job is due."""

from __future__ import annotations

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from san_jobs.job_service.domain.errors import InvalidJobStateError, JobNotFoundError
from san_jobs.job_service.domain.model import (
    Job,
    RetryOutcome,
)
from san_jobs.job_service.domain.ports import CancelParams, RetryFailedParams
from san_jobs.job_service.domain.transitions import (
    NOT_CANCELLABLE,
    RETRIED_BY_ANOTHER_CALL,
    active_holder_reason,
    cancel_message,
)
from san_jobs.job_service.storage import queries
from san_jobs.job_service.storage.connections import StoreParts
from san_jobs.job_service.storage.rows import chunks
from san_jobs.job_service.storage.transition_sql import time_params


class OperatorQueries(StoreParts):
    async def cancel(self, params: CancelParams) -> Job:
        job_id, reason, owner = params.job_id, params.reason, params.owner
        sql = self._sql
        args = {"job_id": job_id, "cancel_reason": reason, "cancel_message": cancel_message(reason)}
        statement = sql.cancel
        if owner is not None:
            statement, args = sql.cancel_owned, args | {"owner": owner}
        bound = time_params(self._now()) | sql.cancel_params.bind(**args)
        async with self._db.single() as conn:
            jobs = await self._db.jobs(conn, statement, bound)
            if jobs:
                return jobs[0]
            current = await self._db.jobs(conn, sql.by_id, {"p_id": job_id})
        if not current or (owner is not None and current[0].requested_by != owner):
            raise JobNotFoundError(job_id)  # another's job does not exist for this caller
        raise InvalidJobStateError(job_id, current[0].status.value, NOT_CANCELLABLE)

    async def retry_failed(self, params: RetryFailedParams) -> RetryOutcome:
        now = self._now()
        db = self._db
        dry_run = params.dry_run
        candidates_stmt = queries.retry_candidates(
            queries.job_filter(params.job_filter, db.pg), params.limit, lock=db.pg and not dry_run
        )
        async with db.single() if dry_run else db.tx() as conn:
            # A job's slot is its tenant's (job_type, target_id): another tenant's
            # active job of the same target holds no slot of its.
            candidates = [
                (r.id, (r.tenant or "", r.job_type, r.target_id))
                for r in await conn.execute(candidates_stmt)
            ]
            active = await self._active_by_target(conn, {c[1][2] for c in candidates})
            to_move: list[str] = []
            skipped: list[tuple[str, str]] = []
            for job_id, slot in candidates:
                holder = active.get(slot)
                if holder is not None:
                    skipped.append((job_id, active_holder_reason(holder)))
                else:
                    # Two FAILED jobs of one slot: the first (oldest failure) goes.
                    active[slot] = job_id
                    to_move.append(job_id)
            if dry_run or not to_move:
                return RetryOutcome(len(candidates), tuple(to_move), tuple(skipped))
            bound = time_params(now) | {"p_extra_attempts": max(1, params.extra_attempts)}
            moved = await self._move_failed(conn, to_move, bound, skipped)
        moved_ids = {job.id for job in moved}
        retried = tuple(i for i in to_move if i in moved_ids)
        for job_id in to_move:
            if job_id not in moved_ids and all(s[0] != job_id for s in skipped):
                skipped.append((job_id, RETRIED_BY_ANOTHER_CALL))
        return RetryOutcome(len(candidates), retried, tuple(skipped))

    async def _active_by_target(
        self, conn: AsyncConnection, target_ids: set[str]
    ) -> dict[tuple[str, str, str], str]:
        """The active job of each (tenant, job_type, target_id) among these targets."""
        found: dict[tuple[str, str, str], str] = {}
        for chunk in chunks(sorted(target_ids)):
            for row in await conn.execute(queries.active_for_targets(chunk)):
                found[(row.tenant or "", row.job_type, row.target_id)] = row.id
        return found

    async def _move_failed(
        self,
        conn: AsyncConnection,
        job_ids: list[str],
        params: dict[str, object],
        skipped: list[tuple[str, str]],
    ) -> list[Job]:
        """FAILED -> PENDING for `job_ids` (only those still FAILED). If an active job
        appeared since the pre-check, the unique index refuses the batch: then job by
        job, each in a savepoint, skipping the refused ones."""
        retry = self._sql.retry_failed

        async def move(ids: list[str]) -> list[Job]:
            return await self._db.jobs(conn, retry, params | {"p_job_ids": ids})

        moved: list[Job] = []
        try:
            async with conn.begin_nested():
                for chunk in chunks(job_ids):
                    moved.extend(await move(list(chunk)))
            return moved
        except IntegrityError:
            moved = []
        for job_id in job_ids:
            try:
                async with conn.begin_nested():
                    moved.extend(await move([job_id]))
            except IntegrityError:
                holder = await self._active_holder(conn, job_id)
                skipped.append((job_id, active_holder_reason(holder or "unknown")))
        return moved

    async def _active_holder(self, conn: AsyncConnection, job_id: str) -> str | None:
        """The id of the active job holding the (tenant, job_type, target_id) slot of
        `job_id`."""
        job = await self._db.jobs(conn, self._sql.by_id, {"p_id": job_id})
        if not job:
            return None
        params = {
            "p_job_type": job[0].job_type.value,
            "p_target_id": job[0].target_id,
            "p_tenant": job[0].tenant,
        }
        holders = await self._db.jobs(conn, self._sql.active_for_target, params)
        return holders[0].id if holders else None
