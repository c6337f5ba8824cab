"""Rows of `async_jobs` as domain Jobs, and the time values the store reads and writes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import RowMapping

from job_service.domain.model import Job, JobAttempt, JobStatus, JobType, NewJob

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


def row_to_job(row: RowMapping) -> Job:
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
    )


def pending_job(job_id: str, new: NewJob, now: datetime) -> Job:
    """The row an enqueue inserts, as a Job (what RETURNING * would give back)."""
    return Job(
        id=job_id,
        job_type=new.job_type,
        status=JobStatus.PENDING,
        target_id=new.target_id,
        request_params=new.request_params,
        requested_by=new.requested_by,
        request_id=new.request_id,
        result=None,
        error_message=None,
        error_code=None,
        error_reason=None,
        attempt_count=0,
        max_attempts=new.max_attempts,
        created_at=now,
        updated_at=now,
        started_at=None,
        completed_at=None,
        failed_at=None,
        cancelled_at=None,
        cancel_reason=None,
        next_attempt_at=None,
        lease_expires_at=None,
        claim_token=None,
        attempts=(),
        traceparent=new.traceparent,
    )
