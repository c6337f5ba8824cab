"""Turning requests into domain values, reporting every bad field at once."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from san.jobs.v1 import job_service_pb2 as pb

from job_service.domain.errors import FieldViolation, InvalidRequestError
from job_service.domain.model import JobFilter, JobStatus, JobType, NewJob, OnDuplicate
from job_service.domain.validation import EnqueueLimits, validate_enqueue
from job_service.transport.convert import (
    JOB_TYPE_FROM_PB,
    STATUS_FROM_PB,
    from_timestamp,
    message_to_dict,
)

MAX_STREAM_JOB_IDS = 1000
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
DEFAULT_RETRY_LIMIT = 1000
MAX_RETRY_LIMIT = 10_000

_ON_DUPLICATE = {
    pb.ON_DUPLICATE_UNSPECIFIED: OnDuplicate.REJECT,
    pb.ON_DUPLICATE_REJECT: OnDuplicate.REJECT,
    pb.ON_DUPLICATE_RETURN_EXISTING: OnDuplicate.RETURN_EXISTING,
}


def _raise_if(violations: list[FieldViolation]) -> None:
    if violations:
        raise InvalidRequestError(violations)


def is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def job_id(field: str, value: str) -> str:
    if not value:
        raise InvalidRequestError([FieldViolation(field, "is required")])
    if not is_uuid(value):
        raise InvalidRequestError([FieldViolation(field, f"{value!r} is not a UUID")])
    return str(uuid.UUID(value))


def _job_ids(field: str, values: Iterable[str], out: list[FieldViolation]) -> tuple[str, ...]:
    ids: list[str] = []
    for index, value in enumerate(values):
        if is_uuid(value):
            ids.append(str(uuid.UUID(value)))
        else:
            out.append(FieldViolation(f"{field}[{index}]", f"{value!r} is not a UUID"))
    return tuple(dict.fromkeys(ids))


E = TypeVar("E")


def _enum_values(
    field: str, values: Iterable[int], known: Mapping[Any, E], what: str, out: list[FieldViolation]
) -> tuple[E, ...]:
    """Decode repeated enum numbers; an unspecified or unknown number is a violation."""
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
    request: pb.EnqueueRequest, limits: EnqueueLimits, default_max_attempts: int
) -> tuple[NewJob, OnDuplicate]:
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
    params = message_to_dict(getattr(request, input_case)) if input_case else {}
    out += validate_enqueue(
        job_type=job_type,
        target_id=request.target_id,
        input_case=input_case,
        params=params,
        requested_by=request.requested_by,
        request_id=request.request_id,
        max_attempts=request.max_attempts,
        limits=limits,
    )
    _raise_if(out)
    assert job_type is not None and on_duplicate is not None
    new = NewJob(
        job_type=job_type,
        target_id=request.target_id,
        request_params=params,
        requested_by=request.requested_by,
        request_id=request.request_id or None,
        max_attempts=request.max_attempts or default_max_attempts,
    )
    return new, on_duplicate


@dataclass(frozen=True, slots=True)
class StreamRequest:
    job_ids: tuple[str, ...]
    job_types: tuple[JobType, ...]
    statuses: tuple[JobStatus, ...]


def stream(request: pb.StreamJobUpdatesRequest) -> StreamRequest:
    out: list[FieldViolation] = []
    if len(request.job_ids) > MAX_STREAM_JOB_IDS:
        out.append(
            FieldViolation(
                "job_ids", f"at most {MAX_STREAM_JOB_IDS} ids; got {len(request.job_ids)}"
            )
        )
    ids = _job_ids("job_ids", request.job_ids, out)
    types = _job_types("job_types", request.job_types, out)
    statuses = _statuses("statuses", request.statuses, out)
    _raise_if(out)
    return StreamRequest(ids, types, statuses)


def list_jobs(request: pb.ListJobsRequest) -> tuple[JobFilter, int, str | None]:
    out: list[FieldViolation] = []
    if request.page_size < 0 or request.page_size > MAX_PAGE_SIZE:
        out.append(FieldViolation("page_size", f"must be between 0 and {MAX_PAGE_SIZE}"))
    job_filter = JobFilter(
        statuses=_statuses("statuses", request.statuses, out),
        job_types=_job_types("job_types", request.job_types, out),
        target_ids=(request.target_id,) if request.target_id else (),
        error_message_contains=request.error_message_contains or None,
        created_after=from_timestamp(request.created_after)
        if request.HasField("created_after")
        else None,
        created_before=from_timestamp(request.created_before)
        if request.HasField("created_before")
        else None,
    )
    _raise_if(out)
    return job_filter, request.page_size or DEFAULT_PAGE_SIZE, request.page_token or None


def retry_failed(request: pb.RetryFailedRequest) -> tuple[JobFilter, int]:
    out: list[FieldViolation] = []
    job_filter = JobFilter(
        job_ids=_job_ids("job_ids", request.job_ids, out),
        statuses=(JobStatus.FAILED,),
        job_types=_job_types("job_types", request.job_types, out),
        target_ids=tuple(request.target_ids),
        error_message_contains=request.error_message_contains or None,
        failed_after=from_timestamp(request.failed_after)
        if request.HasField("failed_after")
        else None,
        failed_before=from_timestamp(request.failed_before)
        if request.HasField("failed_before")
        else None,
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
