"""enqueue_many's parts (no I/O here): the typed outcome of one request, the
requests as sent, and the reading of one BatchEnqueue answer."""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import grpc

from san_jobs.client._errors import (
    FieldViolation,
    InvalidRequestError,
    JobsError,
    error_from_status_message,
)
from san_jobs.client._job_types import JOB_TYPES
from san_jobs.client._views import result as _result
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

MAX_BATCH_SIZE = 1_000
"""Most requests one BatchEnqueue call may carry (the contract's bound)."""
DEFAULT_BATCH_SIZE = 500
DEFAULT_MAX_BATCH_BYTES = 3 * 1024 * 1024
"""Bytes of requests per call: under JobService's default --max-message-bytes (4 MiB),
so that 500 long texts become several calls rather than one refused call."""

# The server names a bad field of item i "requests[i].target_id"; i counts within
# one call, which the caller of enqueue_many never sees (its list is cut into
# chunks), so the outcome names the field as Enqueue would: "target_id".
_ITEM_PATH = re.compile(r"^requests\[\d+\]\.?")
_TYPE_OF_INPUT_FIELD = {info.input_field: info.value for info in JOB_TYPES}


@dataclass(frozen=True, slots=True)
class EnqueueOutcome:
    """What became of one request of ``enqueue_many``.

    Either ``job`` (the stored job without its input, or with ``deduplicated`` the
    existing one: same request_id, or ON_DUPLICATE_RETURN_EXISTING), or ``error``:
    the exception ``enqueue`` would have raised for it alone
    (:class:`InvalidRequestError` with its field violations,
    :class:`DuplicateJobError` with the existing job's id, ...).
    """

    job: pb.Job | None = None
    deduplicated: bool = False
    error: JobsError | None = None

    @property
    def ok(self) -> bool:
        """True when the job was stored or an existing one returned."""
        return self.error is None


ChunkCallback = Callable[[int, Sequence[EnqueueOutcome]], Awaitable[None] | None]
"""``on_chunk(start, outcomes)``: the outcomes of requests[start:start+len(outcomes)],
called once per answered BatchEnqueue call, in order (the asyncio client awaits an
awaitable it returns; JobsClient calls it in the caller's thread)."""


def check_batch_size(batch_size: int) -> None:
    if not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise ValueError(f"batch_size must be 1 to {MAX_BATCH_SIZE}, not {batch_size}")


def as_sent(request: pb.EnqueueRequest) -> pb.EnqueueRequest:
    """``request`` as enqueue_many sends it; the caller's message is not changed.

    As ``enqueue`` does: a request_id is generated when there is none, so that the
    channel's automatic retry of an UNAVAILABLE call can never store a job twice; and
    an unspecified job_type is the type of the input given.
    """
    if not isinstance(request, pb.EnqueueRequest):
        raise TypeError(f"not an EnqueueRequest: {type(request).__name__}")
    case = request.WhichOneof("input")
    infer = request.job_type == pb.JOB_TYPE_UNSPECIFIED and case is not None
    if request.request_id and not infer:
        return request
    sent = pb.EnqueueRequest()
    sent.CopyFrom(request)
    if not sent.request_id:
        sent.request_id = str(uuid.uuid4())
    if infer:
        sent.job_type = _TYPE_OF_INPUT_FIELD[str(case)]
    return sent


def chunks(
    requests: Iterable[pb.EnqueueRequest], batch_size: int, max_bytes: int
) -> Iterator[list[pb.EnqueueRequest]]:
    """The requests as sent, at most ``batch_size`` and about ``max_bytes`` per call
    (a request larger than that alone goes alone); read lazily, so a generator of
    millions of requests is never held whole."""
    check_batch_size(batch_size)
    chunk: list[pb.EnqueueRequest] = []
    size = 0
    for request in requests:
        sent = as_sent(request)
        # Each item costs its size plus a few bytes of framing in the outer message.
        item_bytes = sent.ByteSize() + 8
        if chunk and (len(chunk) == batch_size or size + item_bytes > max_bytes):
            yield chunk
            chunk, size = [], 0
        chunk.append(sent)
        size += item_bytes
    if chunk:
        yield chunk


class Chunks:
    """The calls of one enqueue_many: ``chunks(...)`` in order, and a call the server
    refused as too large for its answer given back as two halves, sent next in place
    of it (nothing of a refused call is stored, so its halves are sent as new)."""

    def __init__(self, requests: Iterable[pb.EnqueueRequest], batch_size: int, max_bytes: int):
        self._source = chunks(requests, batch_size, max_bytes)
        self._again: list[list[pb.EnqueueRequest]] = []

    def __iter__(self) -> Iterator[list[pb.EnqueueRequest]]:
        return self

    def __next__(self) -> list[pb.EnqueueRequest]:
        if self._again:
            return self._again.pop()
        return next(self._source)

    def split_if_refused(self, chunk: Sequence[pb.EnqueueRequest], error: JobsError) -> bool:
        """True (and the halves queued) when ``error`` refused ``chunk`` as a whole for
        its size: INVALID_ARGUMENT naming only ``requests``, as JobService does for a
        batch whose answer could outgrow its --max-message-bytes (enqueue_many never
        sends an empty or over-long batch, the other reasons to name it)."""
        refused = (
            isinstance(error, InvalidRequestError)
            and len(chunk) > 1
            and [v.field for v in error.field_violations] == ["requests"]
        )
        if refused:
            half = len(chunk) // 2
            self._again += [list(chunk[half:]), list(chunk[:half])]  # popped from the end
        return refused


def too_large(chunk: Sequence[pb.EnqueueRequest], error: JobsError, max_bytes: int) -> bool:
    """True when ``error`` failed a call of one request over ``max_bytes``: that is the
    request's own outcome (as Enqueue of it would fail), not the whole call's."""
    return (
        len(chunk) == 1
        and error.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        and chunk[0].ByteSize() > max_bytes
    )


def outcomes(response: pb.BatchEnqueueResponse, sent: int) -> list[EnqueueOutcome]:
    """One outcome per request sent, in order, from a BatchEnqueue answer."""
    if len(response.results) != sent:
        raise JobsError(
            f"BatchEnqueue answered {len(response.results)} results for {sent} requests",
            code=grpc.StatusCode.INTERNAL,
        )
    return [_outcome(result) for result in response.results]


def _outcome(result: pb.BatchEnqueueResult) -> EnqueueOutcome:
    if result.HasField("response"):
        answer = result.response
        return EnqueueOutcome(job=_result(answer.job), deduplicated=answer.deduplicated)
    if not result.HasField("error"):
        raise JobsError("BatchEnqueue answered an empty result", code=grpc.StatusCode.INTERNAL)
    error = error_from_status_message(result.error)
    if isinstance(error, InvalidRequestError):
        error.field_violations = tuple(
            FieldViolation(_ITEM_PATH.sub("", v.field), v.description)
            for v in error.field_violations
        )
    return EnqueueOutcome(error=error)
