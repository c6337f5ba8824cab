"""MemoryJobStore: the JobStore port on jobs held in a dict, for tests that must run in
milliseconds (the worker's state machine) and as a third store under the storage
contract suite (tests/integration/storage), beside SQLite and PostgreSQL.

What a write does to a job comes from the transition declarations alone
(domain/transitions.py, applied by apply_transition.py). What they do not declare is
written here and matches SqlJobStore: which jobs a call picks (claim order, filters,
keyset pages), the unique rules (within a tenant: request_id; one active job per job
type and target), RetryFailed's skip reasons, stats, next_due_at, and the table's CHECK
constraints.

Single-process asyncio: each method yields once on entry (as a database round trip
would), then runs to its end without another await, so every call is atomic. Stores
made on one MemoryTable share their jobs, as SqlJobStores on one database do. Nothing
is notified: notifications are PostgreSQL's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from san_jobs.job_service.domain.errors import (
    DuplicateJobError,
    FieldViolation,
    InvalidJobStateError,
    InvalidRequestError,
    JobNotFoundError,
    StorageFailureError,
)
from san_jobs.job_service.domain.job_ids import new_job_id
from san_jobs.job_service.domain.model import (
    ACTIVE_STATUSES,
    Job,
    NewJob,
    OnDuplicate,
    RetryOutcome,
)
from san_jobs.job_service.domain.ports import (
    CancelParams,
    EnqueueOutcome,
    EnqueueParams,
    JobStore,
    RetryFailedParams,
)
from san_jobs.job_service.domain.transitions import (
    CANCEL,
    ENQUEUE,
    NOT_CANCELLABLE,
    RETRY_FAILED,
    active_holder_reason,
    cancel_message,
)
from san_jobs.job_service.storage.apply_transition import (
    Row,
    status_of,
)
from san_jobs.job_service.storage.memory_pauses import MemoryPauseStore
from san_jobs.job_service.storage.memory_queries import MemoryJobQueries
from san_jobs.job_service.storage.memory_retention import MemoryRetentionStore
from san_jobs.job_service.storage.memory_rows import (
    MemoryRows,
    MemoryTable,
    as_json,
    job_of,
    matches,
)
from san_jobs.job_service.storage.memory_schedules import MemorySchedules
from san_jobs.job_service.storage.memory_worker import MemoryWorkerStore
from san_jobs.job_service.storage.rows import utc_now


class MemoryJobStore(MemorySchedules, MemoryRows):
    """JobStore (and ScheduleStore) on a MemoryTable (a new one unless given). `clock` gives every
    timestamp, as SqlJobStore's does."""

    def __init__(
        self,
        *,
        clock: Callable[[], datetime] = utc_now,
        table: MemoryTable | None = None,
    ) -> None:
        super().__init__(clock=clock, table=table)
        # The ports split out so far, on the same table.
        self.worker = MemoryWorkerStore(clock=clock, table=self.table)
        self.pauses = MemoryPauseStore(clock=clock, table=self.table)
        self.retention = MemoryRetentionStore(clock=clock, table=self.table)
        self.queries = MemoryJobQueries(clock=clock, table=self.table)

    async def close(self) -> None:
        await asyncio.sleep(0)

    async def ping(self) -> None:
        await asyncio.sleep(0)  # memory is always there

    def _active_holder(self, job_type: Any, target_id: str, tenant: str) -> Row | None:
        """The active job of (job_type, target_id) in `tenant` (the keys are a tenant's)."""
        for row in self._rows.values():
            if (
                status_of(row) in ACTIVE_STATUSES
                and row["job_type"] == job_type
                and row["target_id"] == target_id
                and row["tenant"] == tenant
            ):
                return row
        return None

    # -- enqueue ----------------------------------------------------------

    async def enqueue(self, params: EnqueueParams) -> tuple[Job, bool]:
        await asyncio.sleep(0)
        return self._enqueue_now(params.job, params.on_duplicate)

    async def enqueue_many(self, items: Sequence[EnqueueParams]) -> list[EnqueueOutcome]:
        await asyncio.sleep(0)  # one statement's round trip; then atomic, in order
        outcomes: list[EnqueueOutcome] = []
        for item in items:
            try:
                outcomes.append(self._enqueue_now(item.job, item.on_duplicate))
            except (DuplicateJobError, StorageFailureError) as error:
                outcomes.append(error)  # this item's alone (a CHECK it breaks)
        return outcomes

    def _enqueue_now(self, new: NewJob, on_duplicate: OnDuplicate) -> tuple[Job, bool]:
        if new.depends_on:
            # The SQL stores' triggers (migration 0017) are what end dependents; this
            # store, for unit tests of one layer, has none, and says so.
            raise InvalidRequestError(
                [FieldViolation("depends_on", "dependencies need a SQL store")]
            )
        # The unique indexes, in the order SqlJobStore resolves a refused insert; each
        # within the caller's tenant.
        if new.request_id is not None:
            for row in self._rows.values():
                if row["request_id"] == new.request_id and row["tenant"] == new.tenant:
                    return job_of(row), True
        holder = self._active_holder(new.job_type, new.target_id, new.tenant)
        if holder is not None:
            if on_duplicate is OnDuplicate.RETURN_EXISTING:
                return job_of(holder), True
            raise DuplicateJobError(holder["id"])
        args = {
            "job_id": new_job_id(),
            "job_type": new.job_type,
            "target_id": new.target_id,
            "request_params": as_json(new.request_params),
            "requested_by": new.requested_by,
            "request_id": new.request_id,
            "max_attempts": new.max_attempts,
            "traceparent": new.traceparent,
            "tenant": new.tenant,
            "scheduled_at": new.scheduled_at,
            "not_before": new.not_before,
            "priority": new.priority,
        }
        return self._write(ENQUEUE, None, self._call(args)), False

    # -- operators ------------------------------------------------------------------

    async def cancel(self, params: CancelParams) -> Job:
        await asyncio.sleep(0)
        job_id, reason, owner = params.job_id, params.reason, params.owner
        args = {
            "job_id": job_id,
            "cancel_reason": reason,
            "cancel_message": cancel_message(reason),
            "owner": owner,
        }
        call = self._call(args)
        row = self._moving(CANCEL, call)
        if row is not None:
            return self._write(CANCEL, row, call)
        current = self._rows.get(job_id)
        if current is None or (owner is not None and current["requested_by"] != owner):
            raise JobNotFoundError(job_id)  # another's job does not exist for this caller
        raise InvalidJobStateError(job_id, status_of(current).value, NOT_CANCELLABLE)

    async def retry_failed(self, params: RetryFailedParams) -> RetryOutcome:
        await asyncio.sleep(0)
        job_filter, limit = params.job_filter, params.limit
        dry_run, extra_attempts = params.dry_run, params.extra_attempts
        # The candidates: jobs in a status RetryFailed leaves from, oldest failure first.
        candidates = sorted(
            (
                row
                for row in self._rows.values()
                if status_of(row) in RETRY_FAILED.sources and matches(row, job_filter)
            ),
            key=lambda row: (row["failed_at"], row["id"]),
        )[: max(0, limit)]
        to_move: list[Row] = []
        skipped: list[tuple[str, str]] = []
        claimed_slots: dict[tuple[Any, str, str], str] = {}
        for row in candidates:
            slot = (row["job_type"], row["target_id"], row["tenant"])
            holder = self._active_holder(*slot)
            holder_id = holder["id"] if holder is not None else claimed_slots.get(slot)
            if holder_id is not None:
                skipped.append((row["id"], active_holder_reason(holder_id)))
            else:
                # Two FAILED jobs of one target: the first (oldest failure) goes.
                claimed_slots[slot] = row["id"]
                to_move.append(row)
        if not dry_run:
            for row in to_move:
                args = {"job_id": row["id"], "extra_attempts": max(1, extra_attempts)}
                self._write(RETRY_FAILED, row, self._call(args))
        retried = tuple(row["id"] for row in to_move)
        return RetryOutcome(len(candidates), retried, tuple(skipped))


if TYPE_CHECKING:

    def _implements_the_port(store: MemoryJobStore) -> JobStore:
        """mypy checks here that MemoryJobStore has every method of the port."""
        return store
