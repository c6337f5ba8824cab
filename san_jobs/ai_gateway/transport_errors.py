"""The one mapping from the gateway's exceptions (:mod:`san_jobs.ai_gateway.errors`, plain Python)
to rich gRPC statuses: a code, an ErrorInfo reason in domain ``aigateway.san``, details.

Both transports use it: a unary RPC ends with :func:`to_rpc_status`, a StreamCalls call
carries :func:`to_status_proto` in its result, and the call record names the code
(:func:`status_code_name`). So a limit or a failure reads the same however it came::

    InvalidRequest          INVALID_ARGUMENT   INVALID_REQUEST       + BadRequest
    TokenLimitExceeded      INVALID_ARGUMENT   TOKEN_LIMIT_EXCEEDED
    RateLimited             RESOURCE_EXHAUSTED RATE_LIMITED          + RetryInfo, QuotaFailure
    BackendUnavailable      UNAVAILABLE        BACKEND_UNAVAILABLE
    DeadlineExceeded        DEADLINE_EXCEEDED  DEADLINE_EXCEEDED
    MalformedResponse       INTERNAL           MALFORMED_RESPONSE
    Unauthenticated         UNAUTHENTICATED    UNAUTHENTICATED
    PermissionDenied        PERMISSION_DENIED  PERMISSION_DENIED
    InternalError           INTERNAL           (no ErrorInfo: a bug, told only in the log)

The ErrorInfo's metadata is the error's ``metadata``, as it is.
"""

from __future__ import annotations

import grpc
from google.protobuf.message import Message
from google.rpc import code_pb2, status_pb2  # ships no type stubs

from san_jobs.ai_gateway.errors import (
    BackendUnavailable,
    DeadlineExceeded,
    GatewayError,
    InternalError,
    InvalidRequest,
    MalformedResponse,
    PermissionDenied,
    RateLimited,
    TokenLimitExceeded,
    Unauthenticated,
)
from san_jobs.shared import rich_status

DOMAIN = "aigateway.san"
CANCELLED_MESSAGE = "call cancelled by the caller"

# Each error class: its google.rpc code, and its ErrorInfo reason (None: no ErrorInfo).
# An error of a class not listed reads as its nearest listed base class.
WIRE: dict[type[GatewayError], tuple[int, str | None]] = {
    GatewayError: (code_pb2.INTERNAL, "INTERNAL"),
    InvalidRequest: (code_pb2.INVALID_ARGUMENT, "INVALID_REQUEST"),
    TokenLimitExceeded: (code_pb2.INVALID_ARGUMENT, "TOKEN_LIMIT_EXCEEDED"),
    RateLimited: (code_pb2.RESOURCE_EXHAUSTED, "RATE_LIMITED"),
    BackendUnavailable: (code_pb2.UNAVAILABLE, "BACKEND_UNAVAILABLE"),
    DeadlineExceeded: (code_pb2.DEADLINE_EXCEEDED, "DEADLINE_EXCEEDED"),
    MalformedResponse: (code_pb2.INTERNAL, "MALFORMED_RESPONSE"),
    Unauthenticated: (code_pb2.UNAUTHENTICATED, "UNAUTHENTICATED"),
    PermissionDenied: (code_pb2.PERMISSION_DENIED, "PERMISSION_DENIED"),
    InternalError: (code_pb2.INTERNAL, None),
}


def _wire(err: GatewayError) -> tuple[int, str | None]:
    for cls in type(err).__mro__:
        found = WIRE.get(cls)
        if found is not None:
            return found
    raise AssertionError("GatewayError itself is mapped")  # pragma: no cover


def status_code_name(err: GatewayError) -> str:
    """The name of ``err``'s status code (``RESOURCE_EXHAUSTED``), as call records write it."""
    name: str = code_pb2.Code.Name(_wire(err)[0])
    return name


def to_status_proto(err: GatewayError) -> status_pb2.Status:
    """The ``google.rpc.Status`` for ``err``: ErrorInfo first, then the error's own details."""
    code, reason = _wire(err)
    details: list[Message] = []
    if reason is not None:
        details.append(rich_status.error_info(reason, DOMAIN, err.metadata))
    match err:
        case InvalidRequest():
            details.append(rich_status.bad_request(err.violations))
        case RateLimited():
            details.append(rich_status.retry_info(err.retry_delay))
            details.append(rich_status.quota_failure(err.subject, err.description))
    return rich_status.status(code, err.message, details)


def to_rpc_status(err: GatewayError) -> grpc.Status:
    """The status a unary RPC (or a refused stream) ends with for ``err``: the same
    google.rpc.Status, in the trailer."""
    return rich_status.to_grpc_status(to_status_proto(err))


def cancelled_status() -> status_pb2.Status:
    """The result of a StreamCalls call its caller cancelled (no details: it knows why)."""
    return rich_status.status(code_pb2.CANCELLED, CANCELLED_MESSAGE)
