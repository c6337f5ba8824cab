"""Protobuf <-> domain conversion. Protobuf messages never go past the servicer.

Each job type's enum value and input/result messages are found from its registry
entry (domain/job_types.py) in the generated descriptors, once, at import. A job's
input and result are stored as JSON objects and turned into messages by
message_dicts.py (hot path: field by field, not json_format).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from google.protobuf import message_factory
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from san_jobs.job_service.domain.dispatch import DispatchPause, PauseReason
from san_jobs.job_service.domain.failure_groups import (
    MESSAGE_PREFIX_CHARS,
    FailureGroup,
    FailureQuery,
)
from san_jobs.job_service.domain.job_types import JOB_TYPES
from san_jobs.job_service.domain.model import (
    AttemptUsage,
    Job,
    JobAttempt,
    JobStats,
    JobStatus,
    JobType,
)
from san_jobs.job_service.domain.usage import UsageQuery, UsageTotal
from san_jobs.job_service.message_dicts import message_from_dict as message_from_dict
from san_jobs.job_service.message_dicts import message_to_dict as message_to_dict
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb


def _case_message(message: Any, field: str) -> type[Message]:
    """The message class of oneof case `field` of `message` (a descriptor)."""
    return message_factory.GetMessageClass(message.fields_by_name[field].message_type)


JOB_TYPE_TO_PB: dict[JobType, pb.JobType.ValueType] = {
    job_type: pb.JobType.Value(spec.proto_name) for job_type, spec in JOB_TYPES.items()
}
JOB_TYPE_FROM_PB = {v: k for k, v in JOB_TYPE_TO_PB.items()}

# Per type: (input case, its message, result case, its message) of the Job message.
_CASES: dict[JobType, tuple[str, type[Message], str, type[Message]]] = {
    job_type: (
        spec.input_field,
        _case_message(pb.Job.DESCRIPTOR, spec.input_field),
        spec.result_field,
        _case_message(pb.Job.DESCRIPTOR, spec.result_field),
    )
    for job_type, spec in JOB_TYPES.items()
}

STATUS_TO_PB: dict[JobStatus, pb.JobStatus.ValueType] = {
    JobStatus.PENDING: pb.JOB_STATUS_PENDING,
    JobStatus.PROCESSING: pb.JOB_STATUS_PROCESSING,
    JobStatus.COMPLETED: pb.JOB_STATUS_COMPLETED,
    JobStatus.FAILED: pb.JOB_STATUS_FAILED,
    JobStatus.CANCELLED: pb.JOB_STATUS_CANCELLED,
}
STATUS_FROM_PB = {v: k for k, v in STATUS_TO_PB.items()}

PAUSE_REASON_TO_PB: dict[PauseReason, pb.PauseReason.ValueType] = {
    PauseReason.CIRCUIT_OPEN: pb.PAUSE_REASON_CIRCUIT_OPEN,
    PauseReason.RATE_LIMITED: pb.PAUSE_REASON_RATE_LIMITED,
}

# No job type paused: what a conversion without pauses sees.
_NO_PAUSES: Mapping[JobType, DispatchPause] = MappingProxyType({})

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def timestamp(value: datetime | None) -> Timestamp | None:
    return None if value is None else timestamp_of(value)


def timestamp_of(value: datetime) -> Timestamp:
    if value.tzinfo is None:
        value = value.astimezone(UTC)  # as Timestamp.FromDatetime(value.astimezone(UTC))
    delta = value - _EPOCH
    return Timestamp(seconds=delta.days * 86_400 + delta.seconds, nanos=delta.microseconds * 1000)


# google.protobuf.Timestamp's valid range: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z.
MIN_TIMESTAMP_SECONDS = -62_135_596_800
MAX_TIMESTAMP_SECONDS = 253_402_300_799
NANOS_PER_SECOND = 1_000_000_000


def timestamp_violation(message: Timestamp) -> str | None:
    """Why `message` is not a valid Timestamp (years 1 to 9999, nanos in [0, 1e9)),
    or None when it is."""
    if not MIN_TIMESTAMP_SECONDS <= message.seconds <= MAX_TIMESTAMP_SECONDS:
        return (
            f"seconds must be between {MIN_TIMESTAMP_SECONDS} and {MAX_TIMESTAMP_SECONDS} "
            f"(years 1 to 9999); got {message.seconds}"
        )
    if not 0 <= message.nanos < NANOS_PER_SECOND:
        return f"nanos must be between 0 and {NANOS_PER_SECOND - 1}; got {message.nanos}"
    return None


def from_timestamp(message: Timestamp) -> datetime:
    """The UTC datetime of a valid Timestamp (see `timestamp_violation`)."""
    return message.ToDatetime(tzinfo=UTC)


def job_to_pb(
    job: Job,
    *,
    with_input: bool = True,
    pauses: Mapping[JobType, DispatchPause] = _NO_PAUSES,
) -> pb.Job:
    """The Job message. Without `with_input` the input oneof is left unset (Enqueue's
    answer: the caller has the input, and it may be megabytes). A PENDING job whose
    type is in `pauses` (the paused types) gets `waiting_for`."""
    created = timestamp_of(job.created_at)
    fields: dict[str, Any] = {
        "id": job.id,
        "job_type": JOB_TYPE_TO_PB[job.job_type],
        "status": STATUS_TO_PB[job.status],
        "target_id": job.target_id,
        "requested_by": job.requested_by,
        "attempt_count": job.attempt_count,
        "max_attempts": job.max_attempts,
        "priority": job.priority,
        "create_time": created,
        # A new job was last updated when it was made: the same Timestamp twice.
        "update_time": created
        if job.updated_at == job.created_at
        else timestamp_of(job.updated_at),
    }
    # Only the optional fields that hold something: an unset proto3 field reads and
    # serializes as its default anyway, and each keyword costs the constructor (this
    # runs for every Enqueue answer and every stream message).
    for name, text in (
        ("request_id", job.request_id),
        ("error_message", job.error_message),
        ("error_code", job.error_code),
        ("error_reason", job.error_reason),
        ("cancel_reason", job.cancel_reason),
    ):
        if text:
            fields[name] = text
    if job.attempts:
        fields["attempts"] = [attempt_to_pb(a) for a in job.attempts]
    input_case, input_type, result_case, result_type = _CASES[job.job_type]
    if with_input:
        fields[input_case] = message_from_dict(input_type, job.request_params)
    if job.result is not None:
        fields[result_case] = message_from_dict(result_type, job.result)
    for name, value in (
        ("start_time", job.started_at),
        ("complete_time", job.completed_at),
        ("fail_time", job.failed_at),
        # A job waiting for dependencies holds a time no clock reaches there.
        ("next_attempt_time", None if job.dependencies_left else job.next_attempt_at),
        ("cancel_time", job.cancelled_at),
        ("schedule_time", job.scheduled_at),
    ):
        if value is not None:
            fields[name] = timestamp_of(value)
    if job.depends_on:
        fields["depends_on"] = job.depends_on
    if job.waits_for_dependencies:
        # Its own wait comes first: its type's pause matters only once it is due.
        fields["waiting_for"] = pb.DispatchPause(
            reason=pb.PAUSE_REASON_DEPENDENCIES,
            since=created,
            # The store fills waiting_on where it reads the job (GetJob, ListJobs,
            # Enqueue's answer); elsewhere all of them are named.
            job_ids=job.waiting_on or job.depends_on,
        )
    elif job.status is JobStatus.PENDING:
        pause = pauses.get(job.job_type)
        if pause is not None:
            fields["waiting_for"] = pause_to_pb(pause)
    return pb.Job(**fields)


def fill_fresh_job(message: pb.Job, job: Job, created: Timestamp) -> bool:
    """Fill the empty `message` as `job_to_pb(job, with_input=False)` would, field
    by field in place, when `job` is a job just inserted (PENDING, never run, not
    paused: `created` is its create_time): BatchEnqueue's answer, a third of the cost
    of building a Job and copying it in. False (`message` untouched) for any other
    job. The bytes are the same (tests/unit/job_service/test_fresh_job_pb.py)."""
    if (
        job.status is not JobStatus.PENDING
        or job.attempt_count
        or job.attempts
        or job.result is not None
        or job.updated_at != job.created_at
        or job.error_message
        or job.error_code
        or job.error_reason
        or job.cancel_reason
        or job.started_at is not None
        or job.completed_at is not None
        or job.failed_at is not None
        or job.next_attempt_at is not None
        or job.cancelled_at is not None
        or job.scheduled_at is not None
        or job.depends_on
    ):
        return False
    message.id = job.id
    message.job_type = JOB_TYPE_TO_PB[job.job_type]
    message.status = pb.JOB_STATUS_PENDING
    message.target_id = job.target_id
    message.requested_by = job.requested_by
    if job.request_id:
        message.request_id = job.request_id
    message.max_attempts = job.max_attempts
    message.priority = job.priority
    message.create_time.CopyFrom(created)
    message.update_time.CopyFrom(created)
    return True


def job_identity_pb(job: pb.Job) -> pb.Job:
    """`job` cut to what names it and says where it stands: id, type, status, target_id,
    request_id and its create and update times (a BatchEnqueue answer that would not
    fit otherwise: every field but target_id and request_id is of bounded size)."""
    identity = pb.Job(
        id=job.id,
        job_type=job.job_type,
        status=job.status,
        target_id=job.target_id,
        request_id=job.request_id,
    )
    identity.create_time.CopyFrom(job.create_time)
    identity.update_time.CopyFrom(job.update_time)
    return identity


def pause_to_pb(pause: DispatchPause) -> pb.DispatchPause:
    return pb.DispatchPause(
        job_type=JOB_TYPE_TO_PB[pause.job_type],
        reason=PAUSE_REASON_TO_PB[pause.reason],
        since=timestamp_of(pause.since),
        until=timestamp_of(pause.until),
        last_error=pause.last_error,
    )


def attempt_to_pb(attempt: JobAttempt) -> pb.JobAttempt:
    message = pb.JobAttempt(
        attempt=attempt.attempt,
        error_code=attempt.error_code,
        error_reason=attempt.error_reason,
        error_message=attempt.error_message,
        start_time=timestamp_of(attempt.start_time),
    )
    if attempt.end_time is not None:
        message.end_time.CopyFrom(timestamp_of(attempt.end_time))
    if attempt.usage is not None:
        message.usage.CopyFrom(usage_to_pb(attempt.usage))
    return message


def usage_to_pb(usage: AttemptUsage) -> pb.Usage:
    message = pb.Usage(
        model=usage.model,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cached=usage.cached,
    )
    message.duration.FromNanoseconds(round(usage.duration_seconds * 1e9))
    return message


def usage_totals_to_pb(
    totals: Iterable[UsageTotal], truncated: bool, query: UsageQuery
) -> pb.GetUsageResponse:
    response = pb.GetUsageResponse(
        truncated=truncated,
        start_time=timestamp_of(query.start),
        end_time=timestamp_of(query.end),
    )
    for total in totals:
        row = response.totals.add(
            job_type=JOB_TYPE_TO_PB[total.job_type],
            model=total.model,
            requested_by=total.requested_by,
            attempts=total.attempts,
            cached_attempts=total.cached_attempts,
            input_tokens=total.input_tokens,
            output_tokens=total.output_tokens,
        )
        row.duration.FromNanoseconds(round(total.duration_seconds * 1e9))
    return response


def failure_groups_to_pb(
    groups: Iterable[FailureGroup], truncated: bool, query: FailureQuery
) -> pb.ListFailureGroupsResponse:
    return pb.ListFailureGroupsResponse(
        groups=[
            pb.FailureGroup(
                error_code=group.error_code,
                error_reason=group.error_reason,
                message_prefix=group.message_prefix,
                count=group.count,
                latest_fail_time=timestamp_of(group.latest_failed_at),
                example_job_id=group.example_job_id,
            )
            for group in groups
        ],
        truncated=truncated,
        failed_after=timestamp_of(query.failed_after),
        failed_before=timestamp_of(query.failed_before),
        message_prefix_length=MESSAGE_PREFIX_CHARS,
    )


def stats_to_pb(stats: JobStats, paused: Iterable[DispatchPause] = ()) -> pb.GetJobStatsResponse:
    """The stats, with `paused` (the paused job types) in registry order."""
    order = list(JOB_TYPES)
    response = pb.GetJobStatsResponse(
        counts=[
            pb.JobCount(
                job_type=JOB_TYPE_TO_PB[c.job_type], status=STATUS_TO_PB[c.status], count=c.count
            )
            for c in stats.counts
        ],
        paused=[pause_to_pb(p) for p in sorted(paused, key=lambda p: order.index(p.job_type))],
    )
    ts = timestamp(stats.oldest_pending_created_at)
    if ts is not None:
        response.oldest_pending_create_time.CopyFrom(ts)
    return response
