"""MemoryJobCommands: the job commands' port (domain/ports.JobCommands) on a MemoryTable,
as job_commands.py is on the databases: the unique rules (within a tenant: request_id;
one active job per job type and target), BatchEnqueue's per-item outcomes, cancel and
RetryFailed's skip reasons; each write by its transition's declaration."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

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
from san_jobs.job_service.storage.enqueue_conflicts import enqueue_row
from san_jobs.job_service.storage.memory_rows import (
    MemoryRows,
    as_json,
    job_of,
    matches,
)


class MemoryJobCommands(MemoryRows):
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
        return self.enqueue_now(params.job, params.on_duplicate)

    async def enqueue_many(self, items: Sequence[EnqueueParams]) -> list[EnqueueOutcome]:
        await asyncio.sleep(0)  # one statement's round trip; then atomic, in order
        outcomes: list[EnqueueOutcome] = []
        for item in items:
            try:
                outcomes.append(self.enqueue_now(item.job, item.on_duplicate))
            except (DuplicateJobError, StorageFailureError) as error:
                outcomes.append(error)  # this item's alone (a CHECK it breaks)
        return outcomes

    def enqueue_now(self, new: NewJob, on_duplicate: OnDuplicate) -> tuple[Job, bool]:
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
        # ENQUEUE's arguments as the SQL stores bind them, with this table's own values:
        # the type as its enum, the input as a JSON column gives it back.
        args = enqueue_row(new_job_id(), new) | {
            "job_type": new.job_type,
            "request_params": as_json(new.request_params),
        }
        return self._write(ENQUEUE, None, self._call(args)), False

    # -- cancel and RetryFailed ------------------------------------------------------------------

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
