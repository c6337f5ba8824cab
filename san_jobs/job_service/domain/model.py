"""Jobs as the rest of the service sees them: frozen values built from rows.

The wire format (protobuf) and the storage format (SQLAlchemy rows) are turned
into these at their own boundaries; nothing else crosses layers.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

# Kinds of work: declared with their registry entries (job_types.py), named here too
# because every domain value that holds a job's type uses it.
from san_jobs.job_service.domain.job_types import JobType as JobType

JsonDict = dict[str, Any]


class JobStatus(enum.StrEnum):
    """Job states; the values are the plain words stored in `async_jobs.status`."""

    PENDING = "PENDING"
    PROCESSING = "PROCESSING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATUSES

    @property
    def is_active(self) -> bool:
        """Active jobs hold the (job_type, target_id) slot of the unique index."""
        return self in ACTIVE_STATUSES


TERMINAL_STATUSES = frozenset({JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED})
ACTIVE_STATUSES = frozenset({JobStatus.PENDING, JobStatus.PROCESSING})

# The only transitions that ever happen (docs/contract.md, "States").
ALLOWED_TRANSITIONS: frozenset[tuple[JobStatus, JobStatus]] = frozenset(
    {
        (JobStatus.PENDING, JobStatus.PROCESSING),
        (JobStatus.PROCESSING, JobStatus.COMPLETED),
        (JobStatus.PROCESSING, JobStatus.FAILED),
        (JobStatus.PROCESSING, JobStatus.PENDING),  # automatic retry, or given back at shutdown
        (JobStatus.PROCESSING, JobStatus.PROCESSING),  # lease expired, claimed again
        (JobStatus.FAILED, JobStatus.PENDING),  # RetryFailed
        (JobStatus.PENDING, JobStatus.CANCELLED),
        (JobStatus.PROCESSING, JobStatus.CANCELLED),
    }
)


def can_transition(source: JobStatus, target: JobStatus) -> bool:
    return (source, target) in ALLOWED_TRANSITIONS


class OnDuplicate(enum.Enum):
    REJECT = "REJECT"
    RETURN_EXISTING = "RETURN_EXISTING"


@dataclass(frozen=True, slots=True)
class AttemptUsage:
    """What an attempt's gateway call consumed, as the gateway reported it (its
    `Usage`): stored in the attempt record, summed by GetUsage."""

    model: str
    input_tokens: int
    output_tokens: int
    duration_seconds: float
    cached: bool = False

    def to_json(self) -> JsonDict:
        """The `usage` object of an attempt record: a key per field."""
        return {f.name: getattr(self, f.name) for f in fields(AttemptUsage)}

    @classmethod
    def from_json(cls, data: object) -> AttemptUsage | None:
        """The usage of an attempt record's `usage` value (None: JSON null, or not
        an object: an attempt written before usage was kept)."""
        if not isinstance(data, dict):
            return None
        return cls(
            model=str(data.get("model") or ""),
            input_tokens=int(data.get("input_tokens") or 0),
            output_tokens=int(data.get("output_tokens") or 0),
            duration_seconds=float(data.get("duration_seconds") or 0.0),
            cached=bool(data.get("cached")),
        )


@dataclass(frozen=True, slots=True)
class GatewayAnswer:
    """A gateway call's answer: the result as the job stores it (the result message's
    fields, usage not among them) and what the call consumed (None: not reported)."""

    result: JsonDict
    usage: AttemptUsage | None = None


@dataclass(frozen=True, slots=True)
class JobAttempt:
    """One attempt at running a job, kept across retries."""

    attempt: int
    start_time: datetime
    end_time: datetime | None = None
    error_code: str = ""
    error_reason: str = ""
    error_message: str = ""
    # Set when the attempt ends with the gateway's report (a completed call; a
    # failed one when the gateway reported what it used).
    usage: AttemptUsage | None = None

    def to_json(self) -> JsonDict:
        """One element of `async_jobs.attempts`: a key per field (ATTEMPT_FIELDS, the
        shape the storage's SQL builds too), times as ISO 8601 text."""
        return {name: _json_value(getattr(self, name)) for name in ATTEMPT_FIELDS}

    @classmethod
    def from_json(cls, data: JsonDict) -> JobAttempt:
        end = data.get("end_time")
        return cls(
            attempt=int(data["attempt"]),
            start_time=datetime.fromisoformat(data["start_time"]),
            end_time=datetime.fromisoformat(end) if end else None,
            error_code=data.get("error_code") or "",
            error_reason=data.get("error_reason") or "",
            error_message=data.get("error_message") or "",
            usage=AttemptUsage.from_json(data.get("usage")),
        )


# The JSON shape of an attempt record, in order: JobAttempt's fields, declared once.
ATTEMPT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(JobAttempt))


def _json_value(value: object) -> object:
    if isinstance(value, AttemptUsage):
        return value.to_json()
    return value.isoformat() if isinstance(value, datetime) else value


@dataclass(frozen=True, slots=True)
class Job:
    """A job as stored. `request_params` and `result` are JSON objects whose keys are
    the proto field names of the job type's input and result messages."""

    id: str
    job_type: JobType
    status: JobStatus
    target_id: str
    request_params: JsonDict
    requested_by: str
    request_id: str | None
    result: JsonDict | None
    error_message: str | None
    error_code: str | None
    error_reason: str | None
    attempt_count: int
    max_attempts: int
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    failed_at: datetime | None
    cancelled_at: datetime | None
    cancel_reason: str | None
    next_attempt_at: datetime | None
    lease_expires_at: datetime | None
    claim_token: str | None
    attempts: tuple[JobAttempt, ...] = field(default_factory=tuple)
    # The W3C traceparent of the Enqueue call (None: not traced): the parent of each
    # attempt's span. Internal, never in the API.
    traceparent: str | None = None
    # The namespace of the job's keys (request_id, the active (job_type, target_id)):
    # see NewJob.tenant. Internal, never in the API.
    tenant: str = ""
    # The schedule_time given at Enqueue (a delayed job), as given; None without one.
    # While it is ahead, next_attempt_at holds it too (NewJob.not_before).
    scheduled_at: datetime | None = None
    # EnqueueRequest.priority, effective: 1 (most urgent) to 5 (domain/priorities.py).
    priority: int = 3
    # The jobs this one runs after (EnqueueRequest.depends_on), as given; and, while it
    # waits (PENDING, > 0), how many of them are not COMPLETED (domain/dependencies.py).
    depends_on: tuple[str, ...] = ()
    dependencies_left: int | None = None
    # Some job depends on this one: its end changes theirs (the trigger of 0017).
    has_dependents: bool = False
    # When the dependencies' results were merged into request_params (the first
    # claim); None before, and for a job that takes none.
    inputs_merged_at: datetime | None = None
    # Read, not stored: the dependencies not yet COMPLETED, in depends_on order, of a
    # waiting job (GetJob and ListJobs fill it in for Job.waiting_for).
    waiting_on: tuple[str, ...] = ()

    @property
    def waits_for_dependencies(self) -> bool:
        return self.status is JobStatus.PENDING and bool(self.dependencies_left)


@dataclass(slots=True)
class JobDraft:
    """An Enqueue request (or a BatchEnqueue item, or a schedule's template) as decoded
    from the wire, before Enqueue's rules (validation.py) have passed: what the request
    says, as it says it ("" and 0 where a field is not set), the one value the rules
    read. transport/requests.py makes the NewJob from it once they pass, filling in
    the defaults. Not frozen: one is made per BatchEnqueue item, and a frozen
    dataclass's __init__ (an `object.__setattr__` per field) is what issue 15 took out
    of that path."""

    # None: the request's value is unspecified or unknown (the transport reports it;
    # the rules of the other fields are still checked).
    job_type: JobType | None
    # The request's input case (its oneof field name), None when none is set, and that
    # input as JSON ({} when none is set).
    input_field: str | None
    request_params: JsonDict
    target_id: str
    requested_by: str
    request_id: str
    # 0: the service's default.
    max_attempts: int
    # As given: 0 for the default, anything else is checked.
    priority: int
    # The ids as given, canonical once the transport checked them; the rules ask only
    # whether there are any (a TIL's notes or a recall's sources may then come from
    # their results).
    depends_on: Sequence[str]
    # schedule_time, decoded and checked against the clock by the transport (NewJob's
    # fields of the same names); None when not given.
    scheduled_at: datetime | None = None
    not_before: datetime | None = None


@dataclass(frozen=True, slots=True)
class NewJob:
    """What Enqueue asks to store, after validation."""

    job_type: JobType
    target_id: str
    request_params: JsonDict
    requested_by: str
    request_id: str | None
    max_attempts: int
    # The W3C traceparent of the Enqueue call's span, stored with the job.
    traceparent: str | None = None
    # Whose keys these are: request_id and the active (job_type, target_id) are unique
    # per tenant. Under --auth token the authenticated caller's name (the requested_by
    # it is bound to), so one caller can neither see nor block another's keys; under
    # --auth off "" (one tenant: every caller shares the keys, as before issue 22).
    tenant: str = ""
    # A delayed job (EnqueueRequest.schedule_time): `scheduled_at` as given, shown as
    # Job.schedule_time; `not_before` the same time when it was still ahead at the
    # call (None otherwise: a time in the past means now). The job is stored with
    # next_attempt_at = not_before, so its due_at is its schedule time: the claim's
    # order and the worker's next_due_at see it with no rule of their own.
    scheduled_at: datetime | None = None
    not_before: datetime | None = None
    # 1 (most urgent) to 5; the request's 0 is already the default 3 here.
    priority: int = 3
    # EnqueueRequest.depends_on: canonical job ids, no duplicates, at most 100.
    depends_on: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Claim:
    """A job a worker owns until `lease_expires_at`; writes about it carry `token`."""

    job: Job
    token: str


@dataclass(frozen=True, slots=True)
class Failure:
    """A failed attempt, ready to store: code name, ErrorInfo reason, readable message."""

    code: str
    reason: str
    message: str
    transient: bool
    # Lower bound of the delay before the next attempt (the gateway's RetryInfo).
    retry_after_seconds: float | None = None
    # What the failed call consumed, when the gateway reported it.
    usage: AttemptUsage | None = None


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Criteria shared by ListJobs, RetryFailed and the stream feed; AND-combined."""

    job_ids: tuple[str, ...] = ()
    statuses: tuple[JobStatus, ...] = ()
    job_types: tuple[JobType, ...] = ()
    target_ids: tuple[str, ...] = ()
    error_message_contains: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    failed_after: datetime | None = None
    failed_before: datetime | None = None
    # Only jobs requested by this caller (a submitter's reads under --auth token).
    requested_by: str | None = None


@dataclass(frozen=True, slots=True)
class RetryOutcome:
    matched_count: int
    retried_ids: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]  # (job_id, reason)


@dataclass(frozen=True, slots=True)
class JobCount:
    job_type: JobType
    status: JobStatus
    count: int


@dataclass(frozen=True, slots=True)
class JobStats:
    counts: tuple[JobCount, ...]
    oldest_pending_created_at: datetime | None
    # Per type, the due time of the PENDING job due longest ago (only jobs due by
    # now: a retry waiting for its time is not late); types with none are left out.
    # For metrics (the age of the oldest due job, for autoscaling), not GetJobStats.
    oldest_due_by_type: dict[JobType, datetime] = field(default_factory=dict)
