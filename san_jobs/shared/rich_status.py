"""Errors as `google.rpc.Status`, gRPC's rich error model: a code, a message, and typed
details (ErrorInfo, BadRequest, RetryInfo, QuotaFailure), each packed into an `Any`.

Both servers build every error status with these helpers, so their details are packed
one way and one reader (the SDK's, JobService's gateway client) understands both. A
unary or server-streaming handler aborts with `to_grpc_status(...)`: grpcio-status
carries the whole Status, serialized, in the `grpc-status-details-bin` trailer, next to
the plain code and message. A StreamCalls result carries the Status message itself.

Transport code only: it imports grpc and protobuf. Domain errors hold plain values
(`san_jobs.shared.field_violation.FieldViolation`, a delay in seconds) that each server's
transport turns into details here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2  # ships no type stubs
from grpc_status import rpc_status

from san_jobs.shared.field_violation import FieldViolation


def pack(detail: Message) -> any_pb2.Any:
    """`detail` in an Any (type URL `type.googleapis.com/<full name>`)."""
    packed = any_pb2.Any()
    packed.Pack(detail)
    return packed


def status(code: int, message: str, details: Iterable[Message] = ()) -> status_pb2.Status:
    """A google.rpc.Status: `code` is a `google.rpc.code_pb2` value; `details` are packed
    in the order given (by convention ErrorInfo first)."""
    return status_pb2.Status(code=code, message=message, details=[pack(d) for d in details])


def to_grpc_status(rich: status_pb2.Status) -> grpc.Status:
    """What a handler aborts with (`context.abort_with_status`): the Status's code and
    message, and the Status itself in the trailer."""
    converted: grpc.Status = rpc_status.to_status(rich)
    return converted


def error_info(reason: str, domain: str, metadata: Mapping[str, str] | None = None) -> Message:
    """ErrorInfo: the machine-readable reason (`DUPLICATE_JOB`) within `domain`, with
    facts a caller may act on (`existingJobId`)."""
    info: Message = error_details_pb2.ErrorInfo(
        reason=reason, domain=domain, metadata=dict(metadata or {})
    )
    return info


def bad_request(violations: Iterable[FieldViolation]) -> Message:
    """BadRequest naming each bad field, in order (the caller cuts long lists and
    values first: a trailer has a size limit)."""
    bad: Message = error_details_pb2.BadRequest(
        field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=v.field, description=v.description)
            for v in violations
        ]
    )
    return bad


def quota_failure(subject: str, description: str) -> Message:
    """QuotaFailure with one violation: whose quota (`subject`) and which limit."""
    quota: Message = error_details_pb2.QuotaFailure(
        violations=[
            error_details_pb2.QuotaFailure.Violation(subject=subject, description=description)
        ]
    )
    return quota


def retry_info(seconds: float) -> Message:
    """RetryInfo: try again after `seconds` (see `duration` for the rounding)."""
    retry: Message = error_details_pb2.RetryInfo(retry_delay=duration(seconds))
    return retry


def duration(seconds: float) -> duration_pb2.Duration:
    """A protobuf Duration for `seconds`, rounded up to the millisecond and never
    negative: a caller told to wait never retries a little too early."""
    millis = max(0, math.ceil(seconds * 1000))
    return duration_pb2.Duration(seconds=millis // 1000, nanos=(millis % 1000) * 1_000_000)
