"""Protobuf <-> domain conversion. Protobuf messages never go past the servicer.

Hot path (every Enqueue answer and every stream message): messages are built field by
field through their constructors. `json_format` walks descriptors in Python and costs
several times more; `message_from_dict` / `message_to_dict` give the same results as
`ParseDict(ignore_unknown_fields=True)` / `MessageToDict(preserving_proto_field_name
=True)` for the plain messages the jobs carry, and fall back to json_format for
anything else (JSON names, well-known types, enums, maps, odd values).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

from google.protobuf import json_format, message_factory
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.internal.type_checkers import ToShortestFloat
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp
from san.jobs.v1 import job_service_pb2 as pb

from job_service.domain.model import Job, JobAttempt, JobStats, JobStatus, JobType
from job_service.domain.validation import INPUT_CASE_BY_TYPE, RESULT_CASE_BY_TYPE

JOB_TYPE_TO_PB: dict[JobType, pb.JobType.ValueType] = {
    JobType.CARD_ANALYSIS: pb.JOB_TYPE_CARD_ANALYSIS,
    JobType.TIL_GENERATION: pb.JOB_TYPE_TIL_GENERATION,
    JobType.RECALL_GENERATION: pb.JOB_TYPE_RECALL_GENERATION,
}
JOB_TYPE_FROM_PB = {v: k for k, v in JOB_TYPE_TO_PB.items()}

STATUS_TO_PB: dict[JobStatus, pb.JobStatus.ValueType] = {
    JobStatus.PENDING: pb.JOB_STATUS_PENDING,
    JobStatus.PROCESSING: pb.JOB_STATUS_PROCESSING,
    JobStatus.COMPLETED: pb.JOB_STATUS_COMPLETED,
    JobStatus.FAILED: pb.JOB_STATUS_FAILED,
    JobStatus.CANCELLED: pb.JOB_STATUS_CANCELLED,
}
STATUS_FROM_PB = {v: k for k, v in STATUS_TO_PB.items()}

_INPUT_TYPES: dict[JobType, type[Message]] = {
    JobType.CARD_ANALYSIS: pb.CardAnalysisInput,
    JobType.TIL_GENERATION: pb.TilGenerationInput,
    JobType.RECALL_GENERATION: pb.RecallGenerationInput,
}
_RESULT_TYPES: dict[JobType, type[Message]] = {
    JobType.CARD_ANALYSIS: pb.CardAnalysisResult,
    JobType.TIL_GENERATION: pb.TilGenerationResult,
    JobType.RECALL_GENERATION: pb.RecallGenerationResult,
}


MessageT = TypeVar("MessageT", bound=Message)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Field kinds the fast paths handle; any other field makes a message go through json_format.
_SCALAR = "scalar"  # string, bool, 32-bit integers: the same value in a dict and a message
_FLOAT = "float"  # float32: MessageToDict prints the shortest decimal that round-trips
_DOUBLE = "double"
_MESSAGE = "message"
_SCALAR_TYPES = {
    FieldDescriptor.TYPE_STRING,
    FieldDescriptor.TYPE_BOOL,
    FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_SINT32,
    FieldDescriptor.TYPE_SFIXED32,
    FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_FIXED32,
}
_WELL_KNOWN_PREFIX = "google.protobuf."

# descriptor full name -> {field name: (kind, repeated, message class)}; None = not plain.
_PLAIN: dict[str, dict[str, tuple[str, bool, Any]] | None] = {}


def _plain_fields(descriptor: Any) -> dict[str, tuple[str, bool, Any]] | None:
    """The fields of a message made only of plain fields (recursively), else None."""
    name = descriptor.full_name
    if name in _PLAIN:
        return _PLAIN[name]
    _PLAIN[name] = None  # recursion guard: a self-referencing message is not "plain"
    fields: dict[str, tuple[str, bool, Any]] | None = {}
    for field in descriptor.fields:
        repeated = field.is_repeated
        if field.type in _SCALAR_TYPES:
            kind, sub = _SCALAR, None
        elif field.type == FieldDescriptor.TYPE_FLOAT:
            kind, sub = _FLOAT, None
        elif field.type == FieldDescriptor.TYPE_DOUBLE:
            kind, sub = _DOUBLE, None
        elif (
            field.type == FieldDescriptor.TYPE_MESSAGE
            and not field.message_type.GetOptions().map_entry
            and not field.message_type.full_name.startswith(_WELL_KNOWN_PREFIX)
            and _plain_fields(field.message_type) is not None
        ):
            kind, sub = _MESSAGE, message_factory.GetMessageClass(field.message_type)
        else:
            fields = None
            break
        assert fields is not None
        fields[field.name] = (kind, repeated, sub)
    _PLAIN[name] = fields
    return fields


class _NotPlain(Exception):
    """The fast path does not cover this value: use json_format."""


def _build(message_type: type[MessageT], data: Mapping[str, Any]) -> MessageT:
    fields = _plain_fields(message_type.DESCRIPTOR)
    if fields is None or not isinstance(data, Mapping):
        raise _NotPlain
    values: dict[str, Any] = {}
    for key, value in data.items():
        spec = fields.get(key)
        if spec is None:
            raise _NotPlain  # unknown, or a JSON (lowerCamel) name: json_format decides
        if value is not None:  # JSON null: the field's default
            values[key] = _field_value(spec, value)
    try:
        return message_type(**values)
    except (TypeError, ValueError) as error:  # e.g. an int out of int32 range
        raise _NotPlain from error


def _field_value(spec: tuple[str, bool, Any], value: Any) -> Any:
    kind, repeated, sub = spec
    if repeated and not isinstance(value, list):
        raise _NotPlain
    items = value if repeated else [value]
    if kind == _MESSAGE:
        built = [_build(sub, item) for item in items]
        return built if repeated else built[0]
    # A message constructor is stricter than ParseDict for some values (an int given
    # as 5.0 or "5", a float as "NaN"), looser for none: exact types only.
    odd = _odd_scalar if kind == _SCALAR else _odd_float
    if any(odd(v) for v in items):
        raise _NotPlain
    return value


def _odd_scalar(value: Any) -> bool:
    return not isinstance(value, str | bool | int)


def _odd_float(value: Any) -> bool:
    return isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)


def message_from_dict(message_type: type[MessageT], data: Mapping[str, Any]) -> MessageT:
    """`json_format.ParseDict(data, message_type(), ignore_unknown_fields=True)`, fast."""
    try:
        return _build(message_type, data)
    except _NotPlain:
        return json_format.ParseDict(dict(data), message_type(), ignore_unknown_fields=True)


def _dump(message: Message) -> dict[str, Any]:
    fields = _plain_fields(message.DESCRIPTOR)
    if fields is None:
        raise _NotPlain
    out: dict[str, Any] = {}
    for field, value in message.ListFields():
        kind, repeated, _ = fields[field.name]
        if kind == _SCALAR:
            out[field.name] = list(value) if repeated else value
        elif kind == _MESSAGE:
            out[field.name] = [_dump(v) for v in value] if repeated else _dump(value)
        else:
            items = list(value) if repeated else [value]
            if not all(math.isfinite(v) for v in items):
                raise _NotPlain  # NaN and infinities are strings in JSON
            if kind == _FLOAT:
                items = [_shortest_float(v) for v in items]
            out[field.name] = items if repeated else items[0]
    return out


def _shortest_float(value: float) -> float:
    """ToShortestFloat (what MessageToDict prints for a float32), with its answer for
    whole numbers below 2**24 (exact in float32: the number itself) given at once."""
    if value.is_integer() and -16_777_216.0 < value < 16_777_216.0:
        return value
    return float(ToShortestFloat(value))


def message_to_dict(message: Message) -> dict[str, Any]:
    """`json_format.MessageToDict(message, preserving_proto_field_name=True)`, fast."""
    try:
        return _dump(message)
    except _NotPlain:
        return json_format.MessageToDict(message, preserving_proto_field_name=True)


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


def job_to_pb(job: Job, *, with_input: bool = True) -> pb.Job:
    """The Job message. Without `with_input` the input oneof is left unset (Enqueue's
    answer: the caller has the input, and it may be megabytes)."""
    created = timestamp_of(job.created_at)
    fields: dict[str, Any] = {
        "id": job.id,
        "job_type": JOB_TYPE_TO_PB[job.job_type],
        "status": STATUS_TO_PB[job.status],
        "target_id": job.target_id,
        "requested_by": job.requested_by,
        "request_id": job.request_id or "",
        "error_message": job.error_message or "",
        "error_code": job.error_code or "",
        "error_reason": job.error_reason or "",
        "attempt_count": job.attempt_count,
        "max_attempts": job.max_attempts,
        "cancel_reason": job.cancel_reason or "",
        "attempts": [attempt_to_pb(a) for a in job.attempts],
        "create_time": created,
        # A new job was last updated when it was made: the same Timestamp twice.
        "update_time": created
        if job.updated_at == job.created_at
        else timestamp_of(job.updated_at),
    }
    if with_input:
        fields[INPUT_CASE_BY_TYPE[job.job_type]] = message_from_dict(
            _INPUT_TYPES[job.job_type], job.request_params
        )
    if job.result is not None:
        fields[RESULT_CASE_BY_TYPE[job.job_type]] = message_from_dict(
            _RESULT_TYPES[job.job_type], job.result
        )
    for name, value in (
        ("start_time", job.started_at),
        ("complete_time", job.completed_at),
        ("fail_time", job.failed_at),
        ("next_attempt_time", job.next_attempt_at),
        ("cancel_time", job.cancelled_at),
    ):
        if value is not None:
            fields[name] = timestamp_of(value)
    return pb.Job(**fields)


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
    return message


def stats_to_pb(stats: JobStats) -> pb.GetJobStatsResponse:
    response = pb.GetJobStatsResponse(
        counts=[
            pb.JobCount(
                job_type=JOB_TYPE_TO_PB[c.job_type], status=STATUS_TO_PB[c.status], count=c.count
            )
            for c in stats.counts
        ]
    )
    ts = timestamp(stats.oldest_pending_created_at)
    if ts is not None:
        response.oldest_pending_create_time.CopyFrom(ts)
    return response
