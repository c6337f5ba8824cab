"""Turning requests into domain values, reporting every bad field at once."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from google.protobuf.message import Message

from san_jobs.job_service.domain.changes import MAX_CURSOR_CHARS, ChangeFilter
from san_jobs.job_service.domain.dependencies import DEPENDS_ON_FIELD, MAX_DEPENDENCIES
from san_jobs.job_service.domain.errors import FieldViolation, InvalidRequestError
from san_jobs.job_service.domain.failure_groups import (
    DEFAULT_FAILURE_RANGE_SECONDS,
    MAX_FAILURE_RANGE_SECONDS,
    FailureQuery,
)
from san_jobs.job_service.domain.limits import (
    DEFAULT_PAGE_SIZE,
    DEFAULT_RETRY_LIMIT,
    DEFAULT_USAGE_RANGE_SECONDS,
    MAX_CANCEL_REASON_CHARS,
    MAX_ENUM_FILTER_VALUES,
    MAX_ERROR_MESSAGE_CONTAINS_CHARS,
    MAX_JOB_ID_CHARS,
    MAX_PAGE_SIZE,
    MAX_PAGE_TOKEN_CHARS,
    MAX_REQUESTED_BY_CHARS,
    MAX_RETRY_JOB_IDS,
    MAX_RETRY_LIMIT,
    MAX_RETRY_TARGET_IDS,
    MAX_STREAM_JOB_IDS,
    MAX_TARGET_ID_CHARS,
    MAX_USAGE_RANGE_SECONDS,
)
from san_jobs.job_service.domain.model import (
    JobDraft,
    JobFilter,
    JobStatus,
    JobType,
    NewJob,
    OnDuplicate,
)
from san_jobs.job_service.domain.ports import EnqueueParams
from san_jobs.job_service.domain.priorities import (
    LEAST_URGENT,
    MOST_URGENT,
    effective_priority,
)
from san_jobs.job_service.domain.usage import UsageQuery
from san_jobs.job_service.domain.validation import (
    EnqueueLimits,
    check_count,
    check_free_text,
    check_identifier,
    check_schedule,
    validate_enqueue,
)
from san_jobs.job_service.transport.convert import (
    JOB_TYPE_FROM_PB,
    STATUS_FROM_PB,
    from_timestamp,
    message_to_dict,
    timestamp_violation,
)
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "DEFAULT_RETRY_LIMIT",
    "MAX_PAGE_SIZE",
    "MAX_RETRY_LIMIT",
    "MAX_STREAM_JOB_IDS",
    "StreamRequest",
    "cancel",
    "enqueue",
    "is_uuid",
    "job_id",
    "list_jobs",
    "retry_failed",
    "stream",
]
# An invalid value is echoed in its violation only up to this many characters.
_SHOWN_CHARS = 40

_ON_DUPLICATE = {
    pb.ON_DUPLICATE_UNSPECIFIED: OnDuplicate.REJECT,
    pb.ON_DUPLICATE_REJECT: OnDuplicate.REJECT,
    pb.ON_DUPLICATE_RETURN_EXISTING: OnDuplicate.RETURN_EXISTING,
}


def _raise_if(violations: list[FieldViolation]) -> None:
    if violations:
        raise InvalidRequestError(violations)


def is_uuid(value: str) -> bool:
    """True for a string uuid.UUID reads (any of its spellings), of bounded length."""
    if len(value) > MAX_JOB_ID_CHARS:
        return False
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def _shown(value: str) -> str:
    """`value` quoted for an error message, cut short: errors never echo megabytes."""
    if len(value) <= _SHOWN_CHARS:
        return repr(value)
    return f"{value[:_SHOWN_CHARS]!r}... ({len(value)} characters)"


def job_id(field: str, value: str) -> str:
    """The canonical form of the UUID in `value`, or InvalidRequestError on `field`."""
    if not value:
        raise InvalidRequestError([FieldViolation(field, "is required")])
    if not is_uuid(value):
        raise InvalidRequestError([FieldViolation(field, f"{_shown(value)} is not a UUID")])
    return str(uuid.UUID(value))


def _job_ids(
    field: str, values: Sequence[str], max_count: int, out: list[FieldViolation]
) -> tuple[str, ...]:
    if not check_count(field, len(values), max_count, out):
        return ()
    ids: list[str] = []
    for index, value in enumerate(values):
        if is_uuid(value):
            ids.append(str(uuid.UUID(value)))
        else:
            out.append(FieldViolation(f"{field}[{index}]", f"{_shown(value)} is not a UUID"))
    return tuple(dict.fromkeys(ids))


def _timestamp(field: str, request: Message, out: list[FieldViolation]) -> datetime | None:
    """The UTC datetime of an optional Timestamp field, or None when unset or bad."""
    if not request.HasField(field):
        return None
    value = getattr(request, field)
    problem = timestamp_violation(value)
    if problem is not None:
        out.append(FieldViolation(field, problem))
        return None
    return from_timestamp(value)


E = TypeVar("E")


def _enum_values(
    field: str, values: Iterable[int], known: Mapping[Any, E], what: str, out: list[FieldViolation]
) -> tuple[E, ...]:
    """Decode repeated enum numbers; an unspecified or unknown number is a violation."""
    values = list(values)
    if not check_count(field, len(values), MAX_ENUM_FILTER_VALUES, out):
        return ()
    decoded: list[E] = []
    for index, value in enumerate(values):
        member = known.get(value)
        if member is None:
            out.append(
                FieldViolation(f"{field}[{index}]", f"unspecified or unknown {what} {value}")
            )
        else:
            decoded.append(member)
    return tuple(decoded)


def _job_types(field: str, values: Iterable[int], out: list[FieldViolation]) -> tuple[JobType, ...]:
    return _enum_values(field, values, JOB_TYPE_FROM_PB, "job type", out)


def _statuses(
    field: str, values: Iterable[int], out: list[FieldViolation]
) -> tuple[JobStatus, ...]:
    return _enum_values(field, values, STATUS_FROM_PB, "status", out)


def enqueue(
    request: pb.EnqueueRequest,
    limits: EnqueueLimits,
    default_max_attempts: int,
    now: datetime | None = None,
    *,
    caller: str | None = None,
    traceparent: str | None = None,
    as_template: bool = False,
) -> EnqueueParams:
    """The job `request` asks for, decoded once (a JobDraft, checked, made the NewJob
    the application and the store take); `now` (default: the clock) is what its
    schedule_time is measured against. `caller`: the authenticated caller's name,
    the job's requested_by and tenant whatever the request says (NewJob.tenant);
    `traceparent`: the call's span, stored with the job so its attempts join the
    caller's trace. `as_template`: `request` is a schedule's template, whose
    request_id, schedule_time and depends_on are the schedule's to refuse
    (transport/schedules.py names each): taken as unset here, not reported twice."""
    out: list[FieldViolation] = []
    job_type = JOB_TYPE_FROM_PB.get(request.job_type)
    if job_type is None:
        what = (
            "is required"
            if request.job_type == pb.JOB_TYPE_UNSPECIFIED
            else f"unknown value {request.job_type}"
        )
        out.append(FieldViolation("job_type", what))
    on_duplicate = _ON_DUPLICATE.get(request.on_duplicate)
    if on_duplicate is None:
        out.append(FieldViolation("on_duplicate", f"unknown value {request.on_duplicate}"))
    input_case = request.WhichOneof("input")
    draft = JobDraft(
        job_type,
        input_case,
        message_to_dict(getattr(request, input_case)) if input_case else {},
        request.target_id,
        request.requested_by,
        request.request_id,
        request.max_attempts,
        request.priority,
        request.depends_on,
    )
    if as_template:
        # Unset, a refused depends_on does not relax the input's rules either
        # (validate_enqueue's FROM_DEPENDENCIES).
        draft.request_id, draft.depends_on = "", ()
    out += validate_enqueue(draft, limits)
    if draft.depends_on:
        draft.depends_on = _dependencies(draft.depends_on, out)
    # Unset in nearly every request: one HasField, no clock read, for those.
    if not as_template and request.HasField("schedule_time"):
        draft.scheduled_at = _timestamp(SCHEDULE_TIME_FIELD, request, out)
        draft.not_before = check_schedule(
            SCHEDULE_TIME_FIELD, draft.scheduled_at, now or datetime.now(UTC), out
        )
    priority = draft.priority
    if not 0 <= priority <= LEAST_URGENT:
        out.append(
            FieldViolation(
                PRIORITY_FIELD,
                f"must be {MOST_URGENT} (most urgent) to {LEAST_URGENT}, or 0 for the"
                f" default; got {priority}",
            )
        )
    _raise_if(out)
    assert on_duplicate is not None  # else a violation above
    # EnqueueParams(new_job(...), on_duplicate) by its slots, as new_job makes the
    # NewJob: the frozen __init__'s two `object.__setattr__` cost as much as the rest
    # of new_job, per BatchEnqueue item.
    params = _allocate_enqueue_params(EnqueueParams)
    _set_params_job(
        params, new_job(draft, default_max_attempts, caller=caller, traceparent=traceparent)
    )
    _set_params_on_duplicate(params, on_duplicate)
    return params


def _dependencies(values: Sequence[str], out: list[FieldViolation]) -> tuple[str, ...]:
    """EnqueueRequest.depends_on: at most MAX_DEPENDENCIES UUIDs, none twice (the
    store checks that each is the caller's job, of a type the job takes)."""
    if not check_count(DEPENDS_ON_FIELD, len(values), MAX_DEPENDENCIES, out):
        return ()
    seen: dict[str, int] = {}
    for index, value in enumerate(values):
        field = f"{DEPENDS_ON_FIELD}[{index}]"
        if not is_uuid(value):
            out.append(FieldViolation(field, f"{_shown(value)} is not a UUID"))
            continue
        canonical = str(uuid.UUID(value))
        if canonical in seen:
            out.append(FieldViolation(field, f"repeats {DEPENDS_ON_FIELD}[{seen[canonical]}]"))
            continue
        seen[canonical] = index
    return tuple(seen)


SCHEDULE_TIME_FIELD = "schedule_time"
PRIORITY_FIELD = "priority"


# EnqueueParams' slot setters, unpacked: a field added to it fails here at once.
_allocate_enqueue_params = EnqueueParams.__new__
_set_params_job, _set_params_on_duplicate = (
    getattr(EnqueueParams, f.name).__set__ for f in fields(EnqueueParams)
)

# NewJob's slot setters, in field order: unpacked by name in new_job, so a field added
# to NewJob fails there at once instead of leaving a slot unset.
_NEW_JOB_SLOT_SETTERS = tuple(getattr(NewJob, f.name).__set__ for f in fields(NewJob))
_allocate_new_job = NewJob.__new__


def new_job(
    draft: JobDraft,
    default_max_attempts: int,
    *,
    caller: str | None = None,
    traceparent: str | None = None,
) -> NewJob:
    """The NewJob `draft` becomes once Enqueue's rules passed: the defaults filled in
    (max_attempts, priority; no request_id for ""), and with `caller` its
    requested_by and tenant (enqueue's). Built by setting its slots: the frozen
    dataclass's __init__ (an `object.__setattr__` per field) was a third of decoding
    an Enqueue request, run per item of a BatchEnqueue (issue 15). A unit test checks
    it equals the constructed one; NewJob has no __post_init__ to skip."""
    (
        set_job_type,
        set_target_id,
        set_request_params,
        set_requested_by,
        set_request_id,
        set_max_attempts,
        set_traceparent,
        set_tenant,
        set_scheduled_at,
        set_not_before,
        set_priority,
        set_depends_on,
    ) = _NEW_JOB_SLOT_SETTERS
    assert draft.job_type is not None, "a draft whose job_type passed the rules"
    new = _allocate_new_job(NewJob)
    set_job_type(new, draft.job_type)
    set_target_id(new, draft.target_id)
    set_request_params(new, draft.request_params)
    set_request_id(new, draft.request_id or None)
    set_max_attempts(new, draft.max_attempts or default_max_attempts)
    set_traceparent(new, traceparent)
    if caller is None:
        set_requested_by(new, draft.requested_by)
        set_tenant(new, "")  # --auth off's: one tenant, everyone's
    else:
        set_requested_by(new, caller)
        set_tenant(new, caller)
    set_scheduled_at(new, draft.scheduled_at)
    set_not_before(new, draft.not_before)
    set_priority(new, effective_priority(draft.priority))
    depends_on = draft.depends_on
    # Empty in nearly every request: no tuple() of the empty repeated field (a quarter
    # of a microsecond per item).
    set_depends_on(new, tuple(depends_on) if depends_on else ())
    return new


@dataclass(frozen=True, slots=True)
class StreamRequest:
    job_ids: tuple[str, ...]
    job_types: tuple[JobType, ...]
    statuses: tuple[JobStatus, ...]


def stream(request: pb.StreamJobUpdatesRequest) -> StreamRequest:
    """StreamJobUpdates' request: at most MAX_STREAM_JOB_IDS UUIDs, known enum values."""
    out: list[FieldViolation] = []
    ids = _job_ids("job_ids", request.job_ids, MAX_STREAM_JOB_IDS, out)
    types = _job_types("job_types", request.job_types, out)
    statuses = _statuses("statuses", request.statuses, out)
    _raise_if(out)
    return StreamRequest(ids, types, statuses)


def stream_changes(request: pb.StreamJobChangesRequest) -> tuple[str, ChangeFilter]:
    """StreamJobChanges' request: the cursor (its meaning is checked by the feed) and
    the filter, of known enum values."""
    out: list[FieldViolation] = []
    check_identifier("after_cursor", request.after_cursor, MAX_CURSOR_CHARS, out)
    types = _job_types("job_types", request.job_types, out)
    statuses = _statuses("statuses", request.statuses, out)
    _raise_if(out)
    return request.after_cursor, ChangeFilter(job_types=types, statuses=statuses)


def _error_message_contains(value: str, out: list[FieldViolation]) -> str | None:
    field = "error_message_contains"
    check_free_text(field, value, MAX_ERROR_MESSAGE_CONTAINS_CHARS, out)
    return value or None


def list_jobs(request: pb.ListJobsRequest) -> tuple[JobFilter, int, str | None]:
    """ListJobs' filter, page size and page token (decoded later, by the store)."""
    out: list[FieldViolation] = []
    if request.page_size < 0 or request.page_size > MAX_PAGE_SIZE:
        out.append(FieldViolation("page_size", f"must be between 0 and {MAX_PAGE_SIZE}"))
    check_identifier("target_id", request.target_id, MAX_TARGET_ID_CHARS, out)
    check_identifier("page_token", request.page_token, MAX_PAGE_TOKEN_CHARS, out)
    job_filter = JobFilter(
        statuses=_statuses("statuses", request.statuses, out),
        job_types=_job_types("job_types", request.job_types, out),
        target_ids=(request.target_id,) if request.target_id else (),
        error_message_contains=_error_message_contains(request.error_message_contains, out),
        created_after=_timestamp("created_after", request, out),
        created_before=_timestamp("created_before", request, out),
    )
    _raise_if(out)
    return job_filter, request.page_size or DEFAULT_PAGE_SIZE, request.page_token or None


def _target_ids(values: Sequence[str], out: list[FieldViolation]) -> tuple[str, ...]:
    if not check_count("target_ids", len(values), MAX_RETRY_TARGET_IDS, out):
        return ()
    for index, value in enumerate(values):
        check_identifier(f"target_ids[{index}]", value, MAX_TARGET_ID_CHARS, out, required=True)
    return tuple(dict.fromkeys(values))


def retry_failed(request: pb.RetryFailedRequest) -> tuple[JobFilter, int]:
    """RetryFailed's filter (FAILED jobs only) and limit."""
    out: list[FieldViolation] = []
    check_identifier("requested_by", request.requested_by, MAX_REQUESTED_BY_CHARS, out)
    job_filter = JobFilter(
        job_ids=_job_ids("job_ids", request.job_ids, MAX_RETRY_JOB_IDS, out),
        statuses=(JobStatus.FAILED,),
        job_types=_job_types("job_types", request.job_types, out),
        target_ids=_target_ids(request.target_ids, out),
        error_message_contains=_error_message_contains(request.error_message_contains, out),
        failed_after=_timestamp("failed_after", request, out),
        failed_before=_timestamp("failed_before", request, out),
    )
    has_criterion = any(
        (
            job_filter.job_ids,
            job_filter.job_types,
            job_filter.target_ids,
            job_filter.error_message_contains,
            job_filter.failed_after,
            job_filter.failed_before,
        )
    )
    if not has_criterion and not request.all_failed and not out:
        out.append(
            FieldViolation(
                "all_failed", "give at least one filter criterion, or set all_failed to true"
            )
        )
    if request.limit < 0 or request.limit > MAX_RETRY_LIMIT:
        out.append(
            FieldViolation(
                "limit", f"must be between 0 and {MAX_RETRY_LIMIT} (0 means {DEFAULT_RETRY_LIMIT})"
            )
        )
    _raise_if(out)
    return job_filter, request.limit or DEFAULT_RETRY_LIMIT


def cancel(request: pb.CancelJobRequest) -> tuple[str, str]:
    """CancelJob's job id (canonical UUID) and reason."""
    out: list[FieldViolation] = []
    check_free_text("reason", request.reason, MAX_CANCEL_REASON_CHARS, out)
    _raise_if(out)
    return job_id("job_id", request.job_id), request.reason


def usage(request: pb.GetUsageRequest, now: datetime, owner: str | None) -> UsageQuery:
    """GetUsage's range (defaults filled in: end now, start a day before) and types;
    `owner`: only that caller's jobs (a submitter's)."""
    out: list[FieldViolation] = []
    end = _timestamp("end_time", request, out) or now
    start = _timestamp("start_time", request, out)
    if start is None:
        start = end - timedelta(seconds=DEFAULT_USAGE_RANGE_SECONDS)
    types = _job_types("job_types", request.job_types, out)
    if not out:
        if start >= end:
            out.append(FieldViolation("start_time", "must be before end_time"))
        elif end - start > timedelta(seconds=MAX_USAGE_RANGE_SECONDS):
            days = MAX_USAGE_RANGE_SECONDS // 86_400
            out.append(FieldViolation("end_time", f"at most {days} days after start_time"))
    _raise_if(out)
    return UsageQuery(start=start, end=end, job_types=types, requested_by=owner)


def failure_groups(request: pb.ListFailureGroupsRequest, now: datetime) -> FailureQuery:
    """ListFailureGroups' range (defaults filled in: failed_before now, failed_after a
    day before) and types; a range of at most 31 days keeps the read small."""
    out: list[FieldViolation] = []
    before = _timestamp("failed_before", request, out) or now
    after = _timestamp("failed_after", request, out)
    if after is None:
        after = before - timedelta(seconds=DEFAULT_FAILURE_RANGE_SECONDS)
    types = _job_types("job_types", request.job_types, out)
    if not out:
        if after >= before:
            out.append(FieldViolation("failed_after", "must be before failed_before"))
        elif before - after > timedelta(seconds=MAX_FAILURE_RANGE_SECONDS):
            days = MAX_FAILURE_RANGE_SECONDS // 86_400
            out.append(FieldViolation("failed_before", f"at most {days} days after failed_after"))
    _raise_if(out)
    return FailureQuery(failed_after=after, failed_before=before, job_types=types)
