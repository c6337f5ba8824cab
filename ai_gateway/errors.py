"""The gateway's own exceptions, and their one mapping to rich gRPC statuses.

Backends, limits and fault injection raise these; only the transport turns them into
a ``google.rpc.Status`` (:func:`to_status_proto`), so every path that produces, say,
a rate-limit error produces exactly the same status code and details: a unary RPC ends
with it (:func:`to_rpc_status`), a StreamCalls call carries it in its result.

Hierarchy::

    GatewayError
    ├── InvalidRequest          INVALID_ARGUMENT   INVALID_REQUEST       + BadRequest
    ├── TokenLimitExceeded      INVALID_ARGUMENT   TOKEN_LIMIT_EXCEEDED
    ├── RateLimited             RESOURCE_EXHAUSTED RATE_LIMITED          + RetryInfo, QuotaFailure
    ├── BackendUnavailable      UNAVAILABLE        BACKEND_UNAVAILABLE
    ├── DeadlineExceeded        DEADLINE_EXCEEDED  DEADLINE_EXCEEDED
    ├── MalformedResponse       INTERNAL           MALFORMED_RESPONSE
    ├── Unauthenticated         UNAUTHENTICATED    UNAUTHENTICATED
    └── InternalError           INTERNAL           (no ErrorInfo: a bug, told only in the log)
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message
from google.rpc import (  # ships no type stubs
    code_pb2,
    error_details_pb2,
    status_pb2,
)
from grpc_status import rpc_status

DOMAIN = "aigateway.san"
INTERNAL_MESSAGE = "internal error in the AI gateway"
# The longest RetryInfo.retry_delay the gateway ever sends (seconds): whatever an
# upstream's Retry-After or a setting says, a caller is never told to wait longer
# (JobService clamps again, to its own --retry-max-delay).
MAX_RETRY_DELAY = 300.0
# A BadRequest names at most this many fields (then one "... more" entry), and a value
# echoed in an error is cut to MAX_ECHO characters: an error stays small whatever came in.
MAX_VIOLATIONS = 100
MAX_ECHO = 64


@dataclass(frozen=True)
class FieldViolation:
    """One bad request field, as named in ``BadRequest.field_violations``."""

    field: str
    description: str


class GatewayError(Exception):
    """Base of every error the gateway reports to its callers."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL
    reason: str = "INTERNAL"
    # Whether the status names the reason in an ErrorInfo (all but InternalError do).
    has_error_info: ClassVar[bool] = True

    def __init__(self, message: str, *, metadata: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.metadata: dict[str, str] = dict(metadata or {})

    def extra_details(self) -> list[any_pb2.Any]:
        """Details beyond ErrorInfo (RetryInfo, BadRequest, ...); none by default."""
        return []


class InvalidRequest(GatewayError):
    """The request itself is bad; each bad field is named."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    reason = "INVALID_REQUEST"

    def __init__(self, violations: Sequence[FieldViolation]) -> None:
        self.violations = list(violations[:MAX_VIOLATIONS])
        if len(violations) > MAX_VIOLATIONS:
            more = len(violations) - MAX_VIOLATIONS
            self.violations.append(FieldViolation("...", f"and {more} more bad fields"))
        text = "; ".join(f"{v.field}: {v.description}" for v in self.violations)
        super().__init__(f"invalid request: {text}")

    def extra_details(self) -> list[any_pb2.Any]:
        """A BadRequest naming each bad field."""
        bad = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(
                    field=v.field, description=v.description
                )
                for v in self.violations
            ]
        )
        return [_pack(bad)]


class TokenLimitExceeded(GatewayError):
    """The input is longer than the model takes."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    reason = "TOKEN_LIMIT_EXCEEDED"

    def __init__(self, tokens: int, limit: int) -> None:
        # The wording is fixed by the contract: JobService stores it as is.
        super().__init__(
            f"Token limit exceeded ({tokens} > {limit})",
            metadata={"estimatedTokens": str(tokens), "maxInputTokens": str(limit)},
        )
        self.tokens = tokens
        self.limit = limit


class RateLimited(GatewayError):
    """Too many requests: the caller should wait ``retry_delay`` seconds."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    reason = "RATE_LIMITED"

    def __init__(
        self,
        message: str,
        *,
        retry_delay: float,
        subject: str,
        description: str,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message, metadata=metadata)
        self.retry_delay = clamp_delay(retry_delay)
        self.subject = subject
        self.description = description

    def extra_details(self) -> list[any_pb2.Any]:
        """RetryInfo (when to try again) and QuotaFailure (which limit)."""
        retry = error_details_pb2.RetryInfo(retry_delay=seconds_to_duration(self.retry_delay))
        quota = error_details_pb2.QuotaFailure(
            violations=[
                error_details_pb2.QuotaFailure.Violation(
                    subject=self.subject, description=self.description
                )
            ]
        )
        return [_pack(retry), _pack(quota)]


class BackendUnavailable(GatewayError):
    """The model backend is down or unreachable (transient)."""

    code = grpc.StatusCode.UNAVAILABLE
    reason = "BACKEND_UNAVAILABLE"


class DeadlineExceeded(GatewayError):
    """The caller's deadline is too short for the work, or it passed."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED
    reason = "DEADLINE_EXCEEDED"


class MalformedResponse(GatewayError):
    """The model's answer could not be parsed."""

    code = grpc.StatusCode.INTERNAL
    reason = "MALFORMED_RESPONSE"


class Unauthenticated(GatewayError):
    """The caller showed no credentials the gateway knows (see :mod:`ai_gateway.callers`).

    The message says what was missing, never which part of a token was wrong.
    """

    code = grpc.StatusCode.UNAUTHENTICATED
    reason = "UNAUTHENTICATED"


class InternalError(GatewayError):
    """Something unexpected broke inside the gateway (a bug; the traceback is logged).

    The caller learns only that it happened: no ErrorInfo, no internals in the message.
    """

    has_error_info = False

    def __init__(self) -> None:
        super().__init__(INTERNAL_MESSAGE)


def json_error_message(err: json.JSONDecodeError) -> str:
    """The parser's own words for a JSON error, e.g. ``JSON Parse Error at line 4: ...``."""
    return f"JSON Parse Error at line {err.lineno}, column {err.colno}: {err.msg}"


def clamp_delay(seconds: float) -> float:
    """``seconds`` as a delay the gateway may send: finite, from 0 to MAX_RETRY_DELAY.

    NaN (no meaningful wait) becomes 0; infinity becomes the maximum.
    """
    if math.isnan(seconds):
        return 0.0
    return min(MAX_RETRY_DELAY, max(0.0, seconds))


def echo(value: str) -> str:
    """``value`` quoted for an error message, cut to MAX_ECHO characters."""
    if len(value) <= MAX_ECHO:
        return repr(value)
    return f"{value[:MAX_ECHO]!r}... ({len(value)} characters)"


def seconds_to_duration(seconds: float) -> duration_pb2.Duration:
    """A protobuf Duration for ``seconds`` (rounded up to the millisecond, never negative)."""
    millis = max(0, math.ceil(seconds * 1000))
    return duration_pb2.Duration(seconds=millis // 1000, nanos=(millis % 1000) * 1_000_000)


def to_status_proto(err: GatewayError) -> status_pb2.Status:
    """The ``google.rpc.Status`` for ``err``: ErrorInfo first, then the error's own details."""
    details = err.extra_details()
    if err.has_error_info:
        info = error_details_pb2.ErrorInfo(reason=err.reason, domain=DOMAIN, metadata=err.metadata)
        details.insert(0, _pack(info))
    return status_pb2.Status(code=_CODES[err.code], message=err.message, details=details)


def to_rpc_status(err: GatewayError) -> grpc.Status:
    """The status a unary RPC ends with for ``err`` (the same google.rpc.Status)."""
    return rpc_status.to_status(to_status_proto(err))


def cancelled_status() -> status_pb2.Status:
    """The result of a StreamCalls call its caller cancelled (no details: it knows why)."""
    return status_pb2.Status(code=code_pb2.CANCELLED, message="call cancelled by the caller")


def _pack(message: Message) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


# grpc.StatusCode values are (int, name) tuples; google.rpc wants the int.
_CODES: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.INVALID_ARGUMENT: code_pb2.INVALID_ARGUMENT,
    grpc.StatusCode.RESOURCE_EXHAUSTED: code_pb2.RESOURCE_EXHAUSTED,
    grpc.StatusCode.UNAVAILABLE: code_pb2.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: code_pb2.DEADLINE_EXCEEDED,
    grpc.StatusCode.INTERNAL: code_pb2.INTERNAL,
    grpc.StatusCode.UNAUTHENTICATED: code_pb2.UNAUTHENTICATED,
}
