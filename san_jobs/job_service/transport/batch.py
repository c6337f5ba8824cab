"""BatchEnqueue's request and response: each item decoded and validated exactly as an
Enqueue request (requests.enqueue), each answered alone, in request order.

An item's error is the status Enqueue would have ended with (transport/errors.py),
as a google.rpc.Status message in its result; an invalid item's field paths are
prefixed with `requests[i].`, so a caller can find the field in what it sent.

The answer always fits the send limit (--max-message-bytes): items are stored only
after a bound on their answer fits (`decode`), and when the answer itself would not
(existing jobs hold results and attempts of any size), each job in it is cut to its
identity (`response`). Stored and then unanswerable would leave a caller resending a
batch that can never succeed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from google.protobuf.timestamp_pb2 import Timestamp
from google.rpc import status_pb2  # ships no type stubs

from san_jobs.job_service.domain.dispatch import DispatchPause
from san_jobs.job_service.domain.errors import FieldViolation, InvalidRequestError, JobServiceError
from san_jobs.job_service.domain.field_rules import check_count
from san_jobs.job_service.domain.limits import MAX_BATCH_ENQUEUE_REQUESTS
from san_jobs.job_service.domain.model import JobType
from san_jobs.job_service.domain.ports import EnqueueOutcome, EnqueueParams
from san_jobs.job_service.domain.validation import EnqueueLimits
from san_jobs.job_service.transport import requests
from san_jobs.job_service.transport.convert import (
    fill_fresh_job,
    job_identity_pb,
    job_to_pb,
    timestamp_of,
)
from san_jobs.job_service.transport.errors import item_status, to_rich_status
from san_jobs.job_service.transport.requests import PRIORITY_FIELD
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

REQUESTS_FIELD = "requests"

# What an item's entry in the answer may take beyond the strings it repeats from the
# item (target_id, request_id, requested_by): a new job's id, type, status, times and
# max_attempts with the framing, about 100 bytes; a duplicate's error, about 250; a job
# cut to its identity, less than a new one. tests/unit/job_service/
# test_batch_answer_budget.py checks the worst cases against it.
ANSWER_ITEM_OVERHEAD_BYTES = 320

log = logging.getLogger("job_service.transport.batch")


@dataclass(slots=True)
class DecodedBatch:
    """The valid items, ready for the store, and the invalid ones' errors."""

    # The valid items, in request order, and the request index of each.
    items: list[EnqueueParams]
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
    answer_budget_bytes: int,
    undecodable: Mapping[int, FieldViolation] | None = None,
    priority_problem: Callable[[int], str | None] | None = None,
) -> DecodedBatch:
    """Each item as Enqueue decodes it; with `requested_by` (the authenticated
    caller, also each item's tenant) and `traceparent` (this call's span) set on
    every valid item, as Enqueue sets them. An empty or too long batch is
    InvalidRequestError for the whole call, and so is one whose answer might not fit
    in `answer_budget_bytes`. `undecodable`:
    the items that were not valid messages (decoding.PartlyDecodedBatch), each
    invalid with its violation. `priority_problem`: why the caller may not use an
    item's (stored) priority, or None (UrgentPriorities.problem)."""
    count = len(request.requests)
    out: list[FieldViolation] = []
    if count == 0:
        out.append(FieldViolation(REQUESTS_FIELD, "is required (at least one request)"))
    check_count(REQUESTS_FIELD, count, MAX_BATCH_ENQUEUE_REQUESTS, out)
    if out:
        raise InvalidRequestError(out)
    batch = DecodedBatch(items=[], positions=[], errors={}, count=count)
    for index, item in enumerate(request.requests):
        if undecodable and index in undecodable:
            batch.errors[index] = _invalid(index, [undecodable[index]])
            continue
        try:
            # With the caller's name and this call's span set as Enqueue sets them:
            # each item's NewJob is made once, not copied again to set them.
            decoded = requests.enqueue(
                item, limits, default_max_attempts, caller=requested_by, traceparent=traceparent
            )
        except InvalidRequestError as error:
            batch.errors[index] = _invalid(index, error.violations)
            continue
        problem = None if priority_problem is None else priority_problem(decoded.job.priority)
        if problem is not None:  # the caller may not use this priority (UrgentPriorities)
            batch.errors[index] = _invalid(index, [FieldViolation(PRIORITY_FIELD, problem)])
            continue
        batch.items.append(decoded)
        batch.positions.append(index)
    _check_answer_fits(batch, answer_budget_bytes)
    return batch


def answer_bound_bytes(batch: DecodedBatch) -> int:
    """The most bytes the answer to `batch` can take (before any job is cut to its
    identity), whatever the store answers: the strings a job repeats from its item,
    `ANSWER_ITEM_OVERHEAD_BYTES` per item, and the invalid items' errors (built
    already, so measured). An existing job's stored content is not bounded here:
    `response` cuts it when it would not fit."""
    bound = batch.count * ANSWER_ITEM_OVERHEAD_BYTES
    for item in batch.items:
        new = item.job
        bound += len(new.target_id.encode()) + len(new.requested_by.encode())
        if new.request_id is not None:
            bound += len(new.request_id.encode())
    errors: int = sum(error.ByteSize() for error in batch.errors.values())
    return bound + errors


def _check_answer_fits(batch: DecodedBatch, budget_bytes: int) -> None:
    """Refuse, before anything is stored, a batch whose answer could outgrow the send
    limit."""
    bound = answer_bound_bytes(batch)
    if bound <= budget_bytes:
        return
    fitting = max(1, batch.count * budget_bytes // bound)
    raise InvalidRequestError(
        [
            FieldViolation(
                REQUESTS_FIELD,
                f"the answer to these {batch.count} items could exceed --max-message-bytes "
                f"({budget_bytes:,} bytes): send them in batches of at most about {fitting}",
            )
        ]
    )


def _invalid(index: int, violations: Sequence[FieldViolation]) -> status_pb2.Status:
    prefix = f"{REQUESTS_FIELD}[{index}]."
    named = [FieldViolation(prefix + v.field, v.description) for v in violations]
    return to_rich_status(InvalidRequestError(named), "")


def response(
    batch: DecodedBatch,
    outcomes: Sequence[EnqueueOutcome],
    pauses: Mapping[JobType, DispatchPause],
    budget_bytes: int,
) -> pb.BatchEnqueueResponse:
    """One result per request, in request order: the store's outcome of each valid
    item (its job without input, as Enqueue answers), the error of each invalid one.
    Each result is filled in place: a message passed to a constructor is copied, and
    a 500-job answer would copy every job three times. When the answer would take
    more than `budget_bytes` (an existing job brings its result and attempts, a paused
    type its waiting_for), every job in it is cut to its identity, and if that is not
    enough, the existing ones lose their target_id and request_id too."""
    answer = pb.BatchEnqueueResponse()
    results = answer.results
    outcome_at = dict(zip(batch.positions, outcomes, strict=True))
    # The jobs one INSERT made share their create_time: one Timestamp for them all.
    created_at: datetime | None = None
    created = Timestamp()
    # Only an existing job or a pause can take an entry past the bound decode checked.
    may_outgrow = bool(pauses)
    for index in range(batch.count):
        result = results.add()
        outcome = outcome_at.get(index)
        if outcome is None:
            result.error.CopyFrom(batch.errors[index])
        elif isinstance(outcome, InvalidRequestError):  # found by the store (depends_on)
            result.error.CopyFrom(_invalid(index, outcome.violations))
        elif isinstance(outcome, JobServiceError):
            result.error.CopyFrom(item_status(f"BatchEnqueue {REQUESTS_FIELD}[{index}]", outcome))
        else:
            job, deduplicated = outcome
            if job.created_at != created_at:
                created_at, created = job.created_at, timestamp_of(job.created_at)
            may_outgrow = may_outgrow or deduplicated
            if (
                deduplicated
                or job.job_type in pauses
                or not fill_fresh_job(result.response.job, job, created)
            ):
                result.response.job.CopyFrom(job_to_pb(job, with_input=False, pauses=pauses))
            result.response.deduplicated = deduplicated
    if may_outgrow:
        size = answer.ByteSize()
        if size > budget_bytes:
            log.info(
                "BatchEnqueue answer of %d items would take %d bytes, over --max-message-bytes "
                "(%d): its jobs are sent as their identity only (GetJob gives the rest)",
                batch.count,
                size,
                budget_bytes,
            )
            _cut_to_identities(results, keep_keys=True)
            if answer.ByteSize() > budget_bytes:
                # An existing job's target_id and request_id may be longer than the
                # item's (it was found by the other key): the bound holds without them.
                _cut_to_identities(results, keep_keys=False)
    return answer


def _cut_to_identities(results: Sequence[pb.BatchEnqueueResult], *, keep_keys: bool) -> None:
    """Each job of `results` as its identity; without `keep_keys`, an existing job's
    (deduplicated) without target_id and request_id too."""
    for result in results:
        if result.HasField("response"):
            job_message = result.response.job
            job_message.CopyFrom(job_identity_pb(job_message))
            if not keep_keys and result.response.deduplicated:
                job_message.ClearField("target_id")
                job_message.ClearField("request_id")
