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
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
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
from san_jobs.job_service.domain.failure_groups import (
    FailureGroup,
    group_order,
    message_prefix,
)
from san_jobs.job_service.domain.job_ids import new_job_id
from san_jobs.job_service.domain.model import (
    ACTIVE_STATUSES,
    TERMINAL_STATUSES,
    AttemptUsage,
    Job,
    JobCount,
    JobFilter,
    JobStats,
    JobStatus,
    JobType,
    NewJob,
    OnDuplicate,
    RetryOutcome,
)
from san_jobs.job_service.domain.page_token import decode_page_token, encode_page_token
from san_jobs.job_service.domain.ports import (
    CancelParams,
    CountPrunableParams,
    EnqueueOutcome,
    EnqueueParams,
    FailureGroupsParams,
    JobStore,
    ListJobsParams,
    PruneBatchParams,
    RetryFailedParams,
    UsageTotalsParams,
)
from san_jobs.job_service.domain.transitions import (
    CANCEL,
    ENQUEUE,
    NOT_CANCELLABLE,
    RETRY_FAILED,
    active_holder_reason,
    cancel_message,
)
from san_jobs.job_service.domain.usage import UsageTotal, group_key
from san_jobs.job_service.storage.apply_transition import (
    Row,
    status_of,
)
from san_jobs.job_service.storage.memory_pauses import MemoryPauseStore
from san_jobs.job_service.storage.memory_rows import (
    MemoryRows,
    MemoryTable,
    as_json,
    job_of,
)
from san_jobs.job_service.storage.memory_schedules import MemorySchedules
from san_jobs.job_service.storage.memory_worker import MemoryWorkerStore
from san_jobs.job_service.storage.rows import aware, utc_now


def _matches(row: Row, f: JobFilter) -> bool:
    """JobFilter's criteria, AND-combined, with SQL's NULLs (a NULL never matches)."""
    failed_at: datetime | None = row["failed_at"]
    message: str | None = row["error_message"]
    return (
        (f.requested_by is None or row["requested_by"] == f.requested_by)
        and (not f.job_ids or row["id"] in f.job_ids)
        and (not f.statuses or status_of(row) in f.statuses)
        and (not f.job_types or row["job_type"] in f.job_types)
        and (not f.target_ids or row["target_id"] in f.target_ids)
        # Exact and case-sensitive, as on both databases (no LIKE wildcards).
        and (
            not f.error_message_contains
            or (message is not None and f.error_message_contains in message)
        )
        and (f.created_after is None or row["created_at"] >= aware(f.created_after))
        and (f.created_before is None or row["created_at"] < aware(f.created_before))
        and (
            f.failed_after is None or (failed_at is not None and failed_at >= aware(f.failed_after))
        )
        and (
            f.failed_before is None
            or (failed_at is not None and failed_at < aware(f.failed_before))
        )
    )


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
        # The worker's port and the pauses' on the same table.
        self.worker = MemoryWorkerStore(clock=clock, table=self.table)
        self.pauses = MemoryPauseStore(clock=clock, table=self.table)

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

    # -- enqueue and reads ----------------------------------------------------------

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

    async def get(self, job_id: str) -> Job:
        await asyncio.sleep(0)
        row = self._rows.get(job_id)
        if row is None:
            raise JobNotFoundError(job_id)
        return job_of(row)

    async def get_many(self, job_ids: Sequence[str]) -> list[Job]:
        await asyncio.sleep(0)
        return [job_of(self._rows[i]) for i in dict.fromkeys(job_ids) if i in self._rows]

    async def pending_count(self, tenant: str, at_most: int) -> int:
        await asyncio.sleep(0)
        pending = sum(
            1
            for row in self._rows.values()
            if row["status"] == "PENDING" and row["tenant"] == tenant
        )
        return min(pending, at_most)

    async def with_waiting_on(self, jobs: Sequence[Job]) -> list[Job]:
        return list(jobs)  # no job here has dependencies (_enqueue_now)

    async def dependents_moved_by(self, job_ids: Sequence[str]) -> list[str]:
        return []

    async def list_jobs(self, params: ListJobsParams) -> tuple[list[Job], str | None]:
        await asyncio.sleep(0)
        job_filter, page_size, page_token = params.job_filter, params.page_size, params.page_token
        page_size = max(1, page_size)
        after = decode_page_token(page_token) if page_token else None
        rows = sorted(
            (
                row
                for row in self._rows.values()
                if _matches(row, job_filter)
                and (after is None or (row["created_at"], row["id"]) < after)
            ),
            key=lambda row: (row["created_at"], row["id"]),
            reverse=True,
        )
        jobs = [job_of(row) for row in rows[: page_size + 1]]
        if len(jobs) <= page_size:
            return jobs, None
        jobs = jobs[:page_size]
        return jobs, encode_page_token(jobs[-1].created_at, jobs[-1].id)

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
                if status_of(row) in RETRY_FAILED.sources and _matches(row, job_filter)
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

    async def usage_totals(self, params: UsageTotalsParams) -> tuple[list[UsageTotal], bool]:
        await asyncio.sleep(0)
        query, max_groups = params.query, params.max_groups
        groups: dict[tuple[JobType, str, str], list[AttemptUsage]] = {}
        for row in self._rows.values():
            for attempt in row["attempts"]:
                if attempt.usage is not None and query.counts(
                    row["job_type"], row["requested_by"], attempt
                ):
                    key = (row["job_type"], attempt.usage.model, row["requested_by"])
                    groups.setdefault(key, []).append(attempt.usage)
        totals = sorted(
            (
                UsageTotal(
                    job_type=job_type,
                    model=model,
                    requested_by=requested_by,
                    attempts=len(used),
                    cached_attempts=sum(u.cached for u in used),
                    input_tokens=sum(u.input_tokens for u in used),
                    output_tokens=sum(u.output_tokens for u in used),
                    duration_seconds=sum(u.duration_seconds for u in used),
                )
                for (job_type, model, requested_by), used in groups.items()
            ),
            key=group_key,
        )
        return totals[:max_groups], len(totals) > max_groups

    async def failure_groups(self, params: FailureGroupsParams) -> tuple[list[FailureGroup], bool]:
        await asyncio.sleep(0)
        query, max_groups = params.query, params.max_groups
        selection = query.job_filter()
        members: dict[tuple[str, str, str], list[Row]] = {}
        for row in self._rows.values():
            if _matches(row, selection):
                key = (
                    row["error_code"] or "",
                    row["error_reason"] or "",
                    message_prefix(row["error_message"]),
                )
                members.setdefault(key, []).append(row)
        groups = sorted(
            (
                FailureGroup(
                    error_code=code,
                    error_reason=reason,
                    message_prefix=prefix,
                    count=len(rows),
                    latest_failed_at=max(row["failed_at"] for row in rows),
                    example_job_id=max(row["id"] for row in rows),
                )
                for (code, reason, prefix), rows in members.items()
            ),
            key=group_order,
        )
        return groups[:max_groups], len(groups) > max_groups

    async def stats(self) -> JobStats:
        await asyncio.sleep(0)
        counts = Counter((row["job_type"], status_of(row)) for row in self._rows.values())
        oldest = min(
            (
                row["created_at"]
                for row in self._rows.values()
                if status_of(row) is JobStatus.PENDING
            ),
            default=None,
        )
        return JobStats(
            counts=tuple(
                sorted(
                    (JobCount(job_type, status, n) for (job_type, status), n in counts.items()),
                    key=lambda c: (str(c.job_type), str(c.status)),
                )
            ),
            oldest_pending_created_at=oldest,
            oldest_due_by_type=self._oldest_due_by_type(),
        )

    async def fold_counts(self) -> int:
        await asyncio.sleep(0)
        return 0  # counted from the rows each time (the table is small)

    def _oldest_due_by_type(self) -> dict[JobType, datetime]:
        now = aware(self._clock())
        due: dict[JobType, datetime] = {}
        for row in self._rows.values():
            at = row["due_at"]
            if status_of(row) is JobStatus.PENDING and at is not None and at <= now:
                job_type = row["job_type"]
                due[job_type] = min(at, due.get(job_type, at))
        return due

    # -- retention (storage/prune.py is the SQL twin) ----------------------------------

    def _past(self, status: JobStatus, cutoff: datetime) -> list[Row]:
        """Jobs of terminal `status` that ended (updated_at) before `cutoff`, oldest first."""
        if status not in TERMINAL_STATUSES:
            raise ValueError(f"only terminal jobs are pruned, not {status.value}")
        cutoff = aware(cutoff)
        rows = [
            row
            for row in self._rows.values()
            if status_of(row) is status and row["updated_at"] < cutoff
        ]
        return sorted(rows, key=lambda row: row["updated_at"])

    async def count_prunable(self, params: CountPrunableParams) -> dict[JobStatus, int]:
        await asyncio.sleep(0)
        limit = max(0, params.limit)
        return {s: min(len(self._past(s, c)), limit) for s, c in params.cutoffs.items()}

    async def prune_batch(self, params: PruneBatchParams) -> int:
        await asyncio.sleep(0)
        chosen = self._past(params.status, params.cutoff)[: max(0, params.limit)]
        for row in chosen:
            del self._rows[row["id"]]
        return len(chosen)

    @asynccontextmanager
    async def prune_lock(self) -> AsyncIterator[bool]:
        await asyncio.sleep(0)
        if self.table.prune_locked:
            yield False
            return
        self.table.prune_locked = True
        try:
            yield True
        finally:
            self.table.prune_locked = False


if TYPE_CHECKING:

    def _implements_the_port(store: MemoryJobStore) -> JobStore:
        """mypy checks here that MemoryJobStore has every method of the port."""
        return store
