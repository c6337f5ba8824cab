"""BatchEnqueue's request and response: each item decoded and validated exactly as an
Enqueue request (requests.enqueue), each answered alone, in request order.

An item's error is the status Enqueue would have ended with (transport/errors.py),
as a google.rpc.Status message in its result; an invalid item's field paths are
prefixed with `requests[i].`, so a caller can find the field in what it sent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from google.protobuf.timestamp_pb2 import Timestamp
from google.rpc import status_pb2  # ships no type stubs
from san.jobs.v1 import job_service_pb2 as pb

from job_service.domain.dispatch import DispatchPause
from job_service.domain.errors import FieldViolation, InvalidRequestError, JobServiceError
from job_service.domain.field_rules import check_count
from job_service.domain.limits import MAX_BATCH_ENQUEUE_REQUESTS
from job_service.domain.model import JobType, NewJob, OnDuplicate
from job_service.domain.ports import EnqueueOutcome
from job_service.domain.validation import EnqueueLimits
from job_service.transport import requests
from job_service.transport.convert import fill_fresh_job, job_to_pb, timestamp_of
from job_service.transport.errors import item_status, to_rich_status

REQUESTS_FIELD = "requests"


@dataclass(slots=True)
class DecodedBatch:
    """The valid items, ready for the store, and the invalid ones' errors."""

    # The valid items, in request order, and the request index of each.
    items: list[tuple[NewJob, OnDuplicate]]
    positions: list[int]
    # The request index of each invalid item -> its INVALID_ARGUMENT status.
    errors: dict[int, status_pb2.Status]
    count: int


def decode(
    request: pb.BatchEnqueueRequest,
    limits: EnqueueLimits,
    default_max_attempts: int,
    *,
    requested_by: str | None,
    traceparent: str | None,
) -> DecodedBatch:
    """Each item as Enqueue decodes it; with `requested_by` (the authenticated
    caller) and `traceparent` (this call's span) set on every valid item, as Enqueue
    sets them. An empty or too long batch is InvalidRequestError for the whole call."""
    count = len(request.requests)
    out: list[FieldViolation] = []
    if count == 0:
        out.append(FieldViolation(REQUESTS_FIELD, "is required (at least one request)"))
    check_count(REQUESTS_FIELD, count, MAX_BATCH_ENQUEUE_REQUESTS, out)
    if out:
        raise InvalidRequestError(out)
    batch = DecodedBatch(items=[], positions=[], errors={}, count=count)
    for index, item in enumerate(request.requests):
        try:
            new, on_duplicate = requests.enqueue(item, limits, default_max_attempts)
        except InvalidRequestError as error:
            batch.errors[index] = _invalid(index, error.violations)
            continue
        if requested_by is not None or traceparent is not None:
            new = dataclasses.replace(
                new,
                # Who asks is who authenticated, whatever the request says.
                requested_by=new.requested_by if requested_by is None else requested_by,
                # This call's span, stored with each job: its attempts join its trace.
                traceparent=new.traceparent if traceparent is None else traceparent,
            )
        batch.items.append((new, on_duplicate))
        batch.positions.append(index)
    return batch


def _invalid(index: int, violations: Sequence[FieldViolation]) -> status_pb2.Status:
    prefix = f"{REQUESTS_FIELD}[{index}]."
    named = [FieldViolation(prefix + v.field, v.description) for v in violations]
    return to_rich_status(InvalidRequestError(named), "")


def response(
    batch: DecodedBatch,
    outcomes: Sequence[EnqueueOutcome],
    pauses: Mapping[JobType, DispatchPause],
) -> pb.BatchEnqueueResponse:
    """One result per request, in request order: the store's outcome of each valid
    item (its job without input, as Enqueue answers), the error of each invalid one.
    Each result is filled in place: a message passed to a constructor is copied, and
    a 500-job answer would copy every job three times."""
    answer = pb.BatchEnqueueResponse()
    results = answer.results
    outcome_at = dict(zip(batch.positions, outcomes, strict=True))
    # The jobs one INSERT made share their create_time: one Timestamp for them all.
    created_at: datetime | None = None
    created = Timestamp()
    for index in range(batch.count):
        result = results.add()
        outcome = outcome_at.get(index)
        if outcome is None:
            result.error.CopyFrom(batch.errors[index])
        elif isinstance(outcome, JobServiceError):
            result.error.CopyFrom(item_status(f"BatchEnqueue {REQUESTS_FIELD}[{index}]", outcome))
        else:
            job, deduplicated = outcome
            if job.created_at != created_at:
                created_at, created = job.created_at, timestamp_of(job.created_at)
            if (
                deduplicated
                or job.job_type in pauses
                or not fill_fresh_job(result.response.job, job, created)
            ):
                result.response.job.CopyFrom(job_to_pb(job, with_input=False, pauses=pauses))
            result.response.deduplicated = deduplicated
    return answer
