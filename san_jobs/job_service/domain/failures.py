"""How a failed gateway call is written down: the contract's error table.

The stored message must let an operator find every job that failed for the same
reason with one LIKE query, so each kind of failure starts with a fixed prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

from san_jobs.job_service.domain.model import Failure

MAX_ERROR_MESSAGE_CHARS = 1000
ELLIPSIS = "..."

# Failures that may pass by themselves: retried automatically until max_attempts.
TRANSIENT_CODES = frozenset(
    {"DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "UNAVAILABLE", "LEASE_EXPIRED"}
)

RATE_LIMIT_PREFIX = "Rate Limit Exceeded (Too many requests)"
# The reason stored on a job whose gateway call was too big to send (JobService's
# own refusal, in the style of the gateway's ErrorInfo reasons).
REQUEST_TOO_LARGE = "REQUEST_TOO_LARGE"
# Failures whose message is the whole story (the gateway's own words, or ours).
_SELF_DESCRIBED_REASONS = frozenset(
    {"TOKEN_LIMIT_EXCEEDED", "MALFORMED_RESPONSE", REQUEST_TOO_LARGE}
)


@dataclass(frozen=True, slots=True)
class GatewayCallError(Exception):
    """A failed AiGateway call, free of grpc types: the status code name, the
    ErrorInfo reason (or ""), the status message and RetryInfo's delay."""

    code: str
    reason: str
    message: str
    retry_delay_seconds: float | None = None
    deadline_seconds: float | None = None

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


def truncate_error_message(message: str) -> str:
    """Keep the first 1,000 characters (code points, so Korean text is cut between
    syllables, never inside one) and mark the cut with "..."."""
    if len(message) <= MAX_ERROR_MESSAGE_CHARS:
        return message
    return message[:MAX_ERROR_MESSAGE_CHARS] + ELLIPSIS


def _is_rate_limit(error: GatewayCallError) -> bool:
    """The gateway's rate limit says so (ErrorInfo RATE_LIMITED, RetryInfo). A bare
    RESOURCE_EXHAUSTED made by grpc itself (e.g. an oversized message) is not one."""
    return error.reason == "RATE_LIMITED" or error.retry_delay_seconds is not None


def describe_gateway_error(error: GatewayCallError) -> Failure:
    """Turn a gateway failure into what the job stores (docs/contract.md, "AiGateway")."""
    detail = error.message.strip()
    match error.code:
        case "DEADLINE_EXCEEDED":
            within = (
                f" within {error.deadline_seconds:g}s" if error.deadline_seconds is not None else ""
            )
            message = f"Timeout: the AI gateway did not answer{within}"
            # grpc's own words for a client-side deadline ("Deadline Exceeded", "Stream
            # removed (Deadline Exceeded)") say nothing new; the gateway's own do.
            if detail and "deadline exceeded" not in detail.lower():
                message += f" ({detail})"
        case "RESOURCE_EXHAUSTED" if _is_rate_limit(error):
            message = f"{RATE_LIMIT_PREFIX}: {detail}" if detail else RATE_LIMIT_PREFIX
        case "UNAVAILABLE":
            message = f"AI gateway unavailable: {detail or 'no answer'}"
        case "INVALID_ARGUMENT" | "INTERNAL" if error.reason in _SELF_DESCRIBED_REASONS:
            # The gateway's own words are the message: "Token limit exceeded (N > 8192)",
            # "JSON Parse Error at line 4"; or ours: "Request too large for the AI gateway".
            message = detail or error.reason
        case _:
            message = f"{error.code}: {detail}" if detail else error.code
    return Failure(
        code=error.code,
        reason=error.reason,
        message=truncate_error_message(message),
        transient=error.code in TRANSIENT_CODES,
        retry_after_seconds=error.retry_delay_seconds,
    )


def unexpected_failure(error_id: str) -> Failure:
    """A bug or an unforeseen error in our own code: fail the job, don't retry it.
    The message names only `error_id`: the exception's text may hold internals (paths,
    SQL, values), so it goes to the log line carrying the same id, never to callers."""
    return Failure(
        code="INTERNAL",
        reason="",
        message=f"Internal error in the job service (error id {error_id})",
        transient=False,
    )
