"""Rows of `async_jobs` as domain Jobs, and the time values the store reads and writes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

from san_jobs.job_service.domain.model import Job, JobAttempt, JobStatus, JobType, NewJob

# Ids per IN (...) list.
CHUNK = 1_000


def utc_now() -> datetime:
    return datetime.now(UTC)


def aware(value: datetime) -> datetime:
    """`value` in UTC; ValueError for a naive datetime (never guessed)."""
    if value.tzinfo is None:
        raise ValueError(f"naive datetime: {value!r}")
    return value.astimezone(UTC)


def as_utc(value: Any) -> datetime | None:
    """Aggregates (min) lose the column type on SQLite: parse and mark as UTC."""
    if value is None:
        return None
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def chunks(items: Sequence[str], size: int = CHUNK) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def row_to_job(row: Mapping[Any, Any]) -> Job:
    """The Job a row of async_jobs holds (any mapping of its columns: a read's row, an
    outcome's returned columns over the claimed job's, a change feed's snapshot)."""
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
        traceparent=row.get("traceparent"),
        # Never NULL once written: migration 0011's trigger fills in older code's rows.
        tenant=row.get("tenant") or "",
        scheduled_at=row.get("scheduled_at"),
        priority=row.get("priority") or 3,
        depends_on=tuple(row.get("depends_on") or ()),
        dependencies_left=row.get("dependencies_left"),
        has_dependents=bool(row.get("has_dependents")),
        inputs_merged_at=row.get("inputs_merged_at"),
    )


# Job's slot setters, in field order (a frozen dataclass has no other way in but its
# __init__). Unpacked by name in pending_job: a field added to Job makes that unpacking
# fail at the first enqueue instead of leaving a slot unset.
_JOB_SLOT_SETTERS = tuple(getattr(Job, f.name).__set__ for f in fields(Job))
_new_job = Job.__new__


def pending_job(job_id: str, new: NewJob, now: datetime) -> Job:
    """The row an enqueue inserts, as a Job (what RETURNING * would give back).

    Equal to `Job(id=job_id, status=PENDING, created_at=updated_at=now, attempt_count=0,
    attempts=(), the rest of `new`, None elsewhere)` (a unit test checks it), built by
    setting the slots directly: the frozen dataclass's __init__, an
    `object.__setattr__` call per field, was 10-13 % of the job-service's CPU in a
    BatchEnqueue of 500 (issue 15). Job has no __post_init__ to skip."""
    (
        set_id,
        set_job_type,
        set_status,
        set_target_id,
        set_request_params,
        set_requested_by,
        set_request_id,
        set_result,
        set_error_message,
        set_error_code,
        set_error_reason,
        set_attempt_count,
        set_max_attempts,
        set_created_at,
        set_updated_at,
        set_started_at,
        set_completed_at,
        set_failed_at,
        set_cancelled_at,
        set_cancel_reason,
        set_next_attempt_at,
        set_lease_expires_at,
        set_claim_token,
        set_attempts,
        set_traceparent,
        set_tenant,
        set_scheduled_at,
        set_priority,
        set_depends_on,
        set_dependencies_left,
        set_has_dependents,
        set_inputs_merged_at,
        set_waiting_on,
    ) = _JOB_SLOT_SETTERS
    job = _new_job(Job)
    set_id(job, job_id)
    set_job_type(job, new.job_type)
    set_status(job, JobStatus.PENDING)
    set_target_id(job, new.target_id)
    set_request_params(job, new.request_params)
    set_requested_by(job, new.requested_by)
    set_request_id(job, new.request_id)
    set_result(job, None)
    set_error_message(job, None)
    set_error_code(job, None)
    set_error_reason(job, None)
    set_attempt_count(job, 0)
    set_max_attempts(job, new.max_attempts)
    set_created_at(job, now)
    set_updated_at(job, now)
    set_started_at(job, None)
    set_completed_at(job, None)
    set_failed_at(job, None)
    set_cancelled_at(job, None)
    set_cancel_reason(job, None)
    set_next_attempt_at(job, new.not_before)
    set_lease_expires_at(job, None)
    set_claim_token(job, None)
    set_attempts(job, ())
    set_traceparent(job, new.traceparent)
    set_tenant(job, new.tenant)
    set_scheduled_at(job, new.scheduled_at)
    set_priority(job, new.priority)
    # A job with dependencies is inserted by a transaction that reads it back
    # (dependencies.DependentEnqueue): none here.
    set_depends_on(job, ())
    set_dependencies_left(job, None)
    set_has_dependents(job, False)
    set_inputs_merged_at(job, None)
    set_waiting_on(job, ())
    return job
