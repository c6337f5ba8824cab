"""The gateway's own exceptions: what went wrong, and the facts a caller may act on.

Backends, limits, fault injection and validation raise these. They are plain Python,
like the rest of the gateway's core (:mod:`san_jobs.ai_gateway.gateway` knows no gRPC): the
status codes, ErrorInfo reasons and details a caller reads are the transport's
business, decided in one place (:mod:`san_jobs.ai_gateway.transport_errors`), so every path that
produces, say, a rate-limit error produces exactly the same status.

Hierarchy (and what each carries besides its message and ``metadata``)::

    GatewayError
    ├── InvalidRequest          violations (each bad field)
    ├── TokenLimitExceeded      tokens, limit
    ├── RateLimited             retry_delay, subject, description (whose limit, which)
    ├── BackendUnavailable
    ├── DeadlineExceeded
    ├── MalformedResponse
    ├── Unauthenticated
    ├── PermissionDenied
    └── InternalError           (a bug: the caller learns only that it happened)
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence

from san_jobs.shared.field_violation import FieldViolation as FieldViolation

INTERNAL_MESSAGE = "internal error in the AI gateway"
# The longest RetryInfo.retry_delay the gateway ever sends (seconds): whatever an
# upstream's Retry-After or a setting says, a caller is never told to wait longer
# (JobService clamps again, to its own --retry-max-delay).
MAX_RETRY_DELAY = 300.0
# A BadRequest names at most this many fields (then one "... more" entry), and a value
# echoed in an error is cut to MAX_ECHO characters: an error stays small whatever came in.
MAX_VIOLATIONS = 100
MAX_ECHO = 64


class GatewayError(Exception):
    """Base of every error the gateway reports to its callers.

    ``metadata``: named facts for the caller (which limit, whose), sent as they are
    (ErrorInfo metadata on the wire).
    """

    def __init__(self, message: str, *, metadata: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.metadata: dict[str, str] = dict(metadata or {})


class InvalidRequest(GatewayError):
    """The request itself is bad; each bad field is named."""

    def __init__(self, violations: Sequence[FieldViolation]) -> None:
        self.violations = list(violations[:MAX_VIOLATIONS])
        if len(violations) > MAX_VIOLATIONS:
            more = len(violations) - MAX_VIOLATIONS
            self.violations.append(FieldViolation("...", f"and {more} more bad fields"))
        text = "; ".join(f"{v.field}: {v.description}" for v in self.violations)
        super().__init__(f"invalid request: {text}")


class TokenLimitExceeded(GatewayError):
    """The input is longer than the model takes."""

    def __init__(self, tokens: int, limit: int) -> None:
        # The wording is fixed by the contract: JobService stores it as is.
        super().__init__(
            f"Token limit exceeded ({tokens} > {limit})",
            metadata={"estimatedTokens": str(tokens), "maxInputTokens": str(limit)},
        )
        self.tokens = tokens
        self.limit = limit


class RateLimited(GatewayError):
    """Too many requests: the caller should wait ``retry_delay`` seconds.

    ``subject`` is whose limit it is (``client:NAME``, ``backend``) and ``description``
    which limit, in words.
    """

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


class BackendUnavailable(GatewayError):
    """The model backend is down or unreachable (transient)."""


class DeadlineExceeded(GatewayError):
    """The caller's deadline is too short for the work, or it passed."""


class MalformedResponse(GatewayError):
    """The model's answer could not be parsed."""


class Unauthenticated(GatewayError):
    """The caller showed no credentials the gateway knows (see :mod:`san_jobs.ai_gateway.callers`).

    The message says what was missing, never which part of a token was wrong.
    """


class PermissionDenied(GatewayError):
    """The caller is known (its certificate is signed by the trusted CA) but is not one
    the gateway admits (``--tls-client-names``, see :mod:`san_jobs.ai_gateway.callers`)."""


class InternalError(GatewayError):
    """Something unexpected broke inside the gateway (a bug; the traceback is logged).

    The caller learns only that it happened: no reason, no internals in the message.
    """

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
