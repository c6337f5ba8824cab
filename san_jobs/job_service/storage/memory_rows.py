"""The memory store's rows (memory.py, memory_worker.py): the table every store made
on it shares, and writing a row by a transition's declaration, as the SQL stores'
statements do (domain/transitions.py, applied by apply_transition.py)."""

from __future__ import annotations

import copy
import json
import secrets
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from san_jobs.job_service.domain.changes import FeedState, JobChange, is_change
from san_jobs.job_service.domain.dispatch import DispatchPause
from san_jobs.job_service.domain.errors import StorageFailureError
from san_jobs.job_service.domain.model import AttemptUsage, Job, JobFilter, JobStatus, JobType
from san_jobs.job_service.domain.schedules import Schedule
from san_jobs.job_service.domain.transitions import Transition
from san_jobs.job_service.storage.apply_transition import (
    JOB_FIELDS,
    Call,
    Row,
    applies,
    apply,
    status_of,
)
from san_jobs.job_service.storage.rows import aware, utc_now


def usage_json(usage: AttemptUsage | None) -> Any:
    """An attempt's usage as the transitions' `usage` argument: its JSON object."""
    return None if usage is None else as_json(usage.to_json())


def as_json(value: Any) -> Any:
    """A JSON value as a JSON column gives it back: a detached copy, tuples as lists."""
    return json.loads(json.dumps(value))


def constraint_broken(row: Row) -> str | None:
    """The name of the async_jobs CHECK constraint (storage/tables.py) the row breaks,
    if any; `ck_async_jobs_due_at` holds by construction (due_at is derived)."""
    if row["attempt_count"] < 0:
        return "ck_async_jobs_attempt_count"
    if row["max_attempts"] < 1:
        return "ck_async_jobs_max_attempts"
    if (status_of(row) is JobStatus.PROCESSING) != (row["claim_token"] is not None):
        return "ck_async_jobs_claimed"
    return None


def job_of(row: Row) -> Job:
    """The Job a read gives back: its own copies of the JSON values."""
    values = {name: row[name] for name in JOB_FIELDS}
    values["status"] = status_of(row)
    values["request_params"] = copy.deepcopy(row["request_params"])
    values["result"] = copy.deepcopy(row["result"])
    return Job(**values)


def matches(row: Row, f: JobFilter) -> bool:
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


class MemoryTable:
    """The jobs of one in-memory database, by id, and its dispatch pauses by type."""

    def __init__(self) -> None:
        self.rows: dict[str, Row] = {}
        self.pauses: dict[JobType, DispatchPause] = {}
        # Claim limits' token buckets (domain/claim_limits.py): (tokens, refilled at).
        self.buckets: dict[JobType, tuple[float, datetime]] = {}
        # The pruners' lock (PostgreSQL's advisory lock), shared by the table's stores.
        self.prune_locked = False
        # Schedules by (tenant, schedule_id) (memory_schedules.py).
        self.schedules: dict[tuple[str, str], Schedule] = {}
        # The change feed (memory_changes.py): each change with the time it was made,
        # by position, given at the write as SQLite's trigger gives it.
        self.changes: list[tuple[datetime, JobChange]] = []
        self.feed = FeedState(
            feed_id=secrets.token_hex(8),
            last_pos=0,
            pruned_through=0,
            cursor_key=secrets.token_hex(64),
        )


class MemoryRows:
    """A store's view of a MemoryTable (a new one unless given), with its clock: every
    timestamp comes from `clock`, as SqlJobStore's do."""

    def __init__(
        self,
        *,
        clock: Callable[[], datetime] = utc_now,
        table: MemoryTable | None = None,
    ) -> None:
        self._clock = clock
        self.table = table if table is not None else MemoryTable()

    @property
    def _rows(self) -> dict[str, Row]:
        return self.table.rows

    def _call(self, args: dict[str, Any] | None = None, lease_seconds: float = 0.0) -> Call:
        return Call(args=args or {}, now=aware(self._clock()), lease_seconds=lease_seconds)

    def _write(self, transition: Transition, row: Row | None, call: Call) -> Job:
        """Apply `transition` (it applies) and store the row, unless the table's CHECK
        constraints refuse it (StorageFailureError, as the databases' refusal is)."""
        new = apply(transition, row, call)
        broken = constraint_broken(new)
        if broken is not None:
            raise StorageFailureError(f"{transition.name}: the row breaks {broken}")
        self._rows[new["id"]] = new
        job = job_of(new)
        if is_change(None if row is None else status_of(row), job.status):
            self._record_change(job, call.now)
        return job

    def _record_change(self, job: Job, now: datetime) -> None:
        """Append the change, its snapshot as the SQL feed keeps it: no input, lease
        or claim."""
        feed = self.table.feed
        pos = feed.last_pos + 1
        snapshot = replace(job, request_params={}, lease_expires_at=None, claim_token=None)
        self.table.changes.append((now, JobChange(pos, snapshot)))
        self.table.feed = replace(feed, last_pos=pos)

    def _moving(self, transition: Transition, call: Call) -> Row | None:
        """The row named by the call's `job_id`, if `transition` applies to it."""
        row = self._rows.get(call.args["job_id"])
        return row if row is not None and applies(transition, row, call) else None
