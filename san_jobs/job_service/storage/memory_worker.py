"""MemoryWorkerStore: the worker's port (domain/ports.WorkerStore) on a MemoryTable, as
worker_store.py is on the databases: which jobs a claim picks (order, fair share, a
type's limits), and each write by its transition's declaration.

Single-process asyncio: each method yields once (as a database round trip would),
and runs its reads and writes without an await in between, so every call is atomic.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime

from san_jobs.job_service.domain.claim_limits import (
    LimitedClaim,
    allowance,
    refilled,
    wait_after,
)
from san_jobs.job_service.domain.errors import LeaseLostError
from san_jobs.job_service.domain.model import (
    ACTIVE_STATUSES,
    Claim,
    Job,
    JobStatus,
    JobType,
)
from san_jobs.job_service.domain.ports import (
    ClaimParams,
    CompleteParams,
    FailParams,
    LimitedClaimParams,
    ReleaseParams,
    RenewLeasesParams,
)
from san_jobs.job_service.domain.priorities import AgeShare
from san_jobs.job_service.domain.transitions import (
    CLAIM,
    COMPLETE,
    FAIL_AND_RETRY,
    FAIL_FINAL,
    LEASE_EXHAUSTED,
    RELEASE,
    RENEW_LEASE,
    claim_type_args,
)
from san_jobs.job_service.storage.apply_transition import Row, applies, status_of
from san_jobs.job_service.storage.memory_rows import (
    MemoryRows,
    MemoryTable,
    as_json,
    usage_json,
)
from san_jobs.job_service.storage.outcome_rows import check_claimed
from san_jobs.job_service.storage.rows import aware, utc_now


class MemoryWorkerStore(MemoryRows):
    def __init__(
        self,
        *,
        clock: Callable[[], datetime] = utc_now,
        table: MemoryTable | None = None,
    ) -> None:
        super().__init__(clock=clock, table=table)
        # Which order the next claim takes, as SqlWorkerStore's (domain/priorities.py).
        self._age_share = AgeShare()

    async def claim(self, params: ClaimParams) -> list[Claim]:
        await asyncio.sleep(0)
        return self._claim_now(
            params.limit,
            params.lease_seconds,
            params.skip_types,
            params.only_type,
            params.max_per_caller,
        )

    def _claim_now(
        self,
        limit: int,
        lease_seconds: float,
        skip_types: frozenset[JobType],
        only_type: JobType | None,
        max_per_caller: int | None = None,
    ) -> list[Claim]:
        if limit <= 0:
            return []
        call = self._call(claim_type_args(skip_types, only_type), lease_seconds=lease_seconds)
        # By age: oldest due first; by priority: the most urgent first, then oldest
        # due (domain/priorities.py). Ties: oldest job first. Returned oldest job first.
        by_age = self._age_share.next_by_age()
        due = sorted(
            (row for row in self._rows.values() if applies(CLAIM, row, call)),
            key=lambda row: (
                0 if by_age else row["priority"],
                row["due_at"],
                row["created_at"],
                row["id"],
            ),
        )
        if max_per_caller is not None:
            due = self._fair(due, max_per_caller)
        due = due[:limit]
        self._age_share.took(len(due), by_age)
        jobs = sorted(
            (self._write(CLAIM, row, call) for row in due), key=lambda j: (j.created_at, j.id)
        )
        return [Claim(job=job, token=job.claim_token or "") for job in jobs]

    async def claim_limited(self, params: LimitedClaimParams) -> LimitedClaim:
        job_type, limit, type_limit = params.job_type, params.limit, params.type_limit
        lease_seconds, max_per_caller = params.lease_seconds, params.max_per_caller
        # One event loop: nothing runs between the reads and the writes below (no
        # await), as the SQL store's row lock ensures across instances.
        if limit <= 0:
            return LimitedClaim()
        now = aware(self._clock())
        tokens = None
        if type_limit.per_second is not None:
            held, at = self.table.buckets.get(job_type, (type_limit.burst, now))
            tokens = refilled(held, at, now, type_limit)
        running = sum(
            1
            for row in self._rows.values()
            if row["job_type"] == job_type and status_of(row) is JobStatus.PROCESSING
        )
        allowed = allowance(limit, type_limit, tokens, running)
        claims = self._claim_now(allowed.jobs, lease_seconds, frozenset(), job_type, max_per_caller)
        tokens_left = None
        if tokens is not None:
            tokens_left = tokens - len(claims)
            self.table.buckets[job_type] = (tokens_left, now)
        await asyncio.sleep(0)
        return LimitedClaim(claims, wait_after(len(claims), allowed, tokens_left, type_limit))

    def _fair(self, due: list[Row], max_per_caller: int) -> list[Row]:
        """Of `due` (oldest due first), what each caller may still start: fair share,
        as the SQL stores' ranking (the limit minus the caller's PROCESSING jobs)."""
        room = Counter(
            row["requested_by"]
            for row in self._rows.values()
            if status_of(row) is JobStatus.PROCESSING
        )
        taken: list[Row] = []
        for row in due:
            caller = row["requested_by"]
            room[caller] += 1
            if room[caller] <= max_per_caller:
                taken.append(row)
        return taken

    async def fail_exhausted_leases(self) -> list[Job]:
        await asyncio.sleep(0)
        call = self._call()
        expired = [row for row in self._rows.values() if applies(LEASE_EXHAUSTED, row, call)]
        return [self._write(LEASE_EXHAUSTED, row, call) for row in expired]

    async def renew_leases(self, params: RenewLeasesParams) -> set[str]:
        await asyncio.sleep(0)
        owned: set[str] = set()
        for job_id, token in params.leases:
            call = self._call({"job_id": job_id, "token": token}, params.lease_seconds)
            row = self._moving(RENEW_LEASE, call)
            if row is not None:
                self._write(RENEW_LEASE, row, call)
                owned.add(job_id)
        return owned

    async def complete(self, params: CompleteParams) -> Job:
        # params.claimed saves nothing here (the row is at hand), but is checked alike.
        job_id = params.job_id
        check_claimed(job_id, params.claimed)
        await asyncio.sleep(0)
        call = self._call(
            {
                "job_id": job_id,
                "token": params.token,
                "result": as_json(params.result),
                "usage": usage_json(params.usage),
            }
        )
        row = self._moving(COMPLETE, call)
        if row is None:
            raise LeaseLostError(job_id)
        return self._write(COMPLETE, row, call)

    async def fail(self, params: FailParams) -> Job:
        job_id, failure, retry_at = params.job_id, params.failure, params.retry_at
        check_claimed(job_id, params.claimed)  # as in complete
        await asyncio.sleep(0)
        call = self._call(
            {
                "job_id": job_id,
                "token": params.token,
                "code": failure.code,
                "reason": failure.reason,
                "message": failure.message,
                "retry_at": None if retry_at is None else aware(retry_at),
                "usage": usage_json(failure.usage),
            }
        )
        # Each declaration's `when` says which of the two this call is.
        for transition in (FAIL_AND_RETRY, FAIL_FINAL):
            row = self._moving(transition, call)
            if row is not None:
                return self._write(transition, row, call)
        raise LeaseLostError(job_id)

    async def end_unsettled(self, params: FailParams) -> list[Job]:
        # No job here has dependents (_enqueue_now): a plain final failure.
        return [await self.fail(replace(params, retry_at=None))]

    async def release(self, params: ReleaseParams) -> Job | None:
        await asyncio.sleep(0)
        call = self._call({"job_id": params.job_id, "token": params.token})
        row = self._moving(RELEASE, call)
        return None if row is None else self._write(RELEASE, row, call)

    async def next_due_at(self) -> datetime | None:
        await asyncio.sleep(0)
        return min(_due_times(self._rows.values()), default=None)


def _due_times(rows: Iterable[Row]) -> Iterable[datetime]:
    for row in rows:
        if status_of(row) in ACTIVE_STATUSES and row["due_at"] is not None:
            yield row["due_at"]
