"""The one place where the service's exceptions become gRPC statuses with rich
details (google.rpc.Status: ErrorInfo in domain `jobs.san`, BadRequest), packed by
san_jobs.shared.rich_status as AiGateway's are.

What a caller reads is the caller's business only: a storage error says which kind
it is (UNAVAILABLE: retry; INVALID_ARGUMENT: a value the database refused; INTERNAL:
ours) in fixed words; anything unexpected is INTERNAL "internal error" with an error
id, and the ERROR log line with that id holds the details and the stack. No SQL,
stack, path or connection string reaches a caller. Every value a status echoes is
cut short (`clip`), and so are its message and its list of violations, so a 13 MB
id never makes a 13 MB trailer (grpc's default limit for a whole trailer is 8 KiB).
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message
from google.rpc import code_pb2, status_pb2  # ships no type stubs

from san_jobs.job_service.domain.errors import (
    CursorExpiredError,
    DuplicateJobError,
    FieldViolation,
    InvalidJobStateError,
    InvalidRequestError,
    JobNotFoundError,
    JobServiceError,
    PermissionDeniedError,
    PruneRunningError,
    QuotaExceededError,
    StorageDataError,
    StorageUnavailableError,
    UnauthenticatedError,
)
from san_jobs.job_service.domain.schedules import (
    ScheduleExistsError,
    ScheduleNotFoundError,
)
from san_jobs.shared import rich_status

log = logging.getLogger("job_service.transport.errors")

DOMAIN = "jobs.san"
Req = TypeVar("Req")
Resp = TypeVar("Resp")

# A value from the caller, echoed back (an id, a field name): at most this long.
MAX_ECHO_CHARS = 64
# One violation's description, and the status message as a whole.
MAX_DESCRIPTION_CHARS = 200
MAX_MESSAGE_CHARS = 1_000
# Violations listed in a BadRequest (the rest are counted in the message).
MAX_VIOLATIONS = 20

INTERNAL_MESSAGE = "internal error"
UNAVAILABLE_MESSAGE = "database unavailable; try again later"
REFUSED_VALUE_MESSAGE = (
    "the database refused a value of this request (too long, out of range, or a "
    "character it cannot store)"
)


def clip(value: str, limit: int = MAX_ECHO_CHARS) -> str:
    """`value` cut to `limit` characters, then "...": for echoing what a caller sent."""
    return value if len(value) <= limit else value[:limit] + "..."


def _cut_middle(text: str, limit: int) -> str:
    """`text` at most about `limit` characters, keeping its start and its end (where a
    description says what is wrong: "'xxxx...' is not a UUID")."""
    if len(text) <= limit:
        return text
    tail = limit // 4
    return f"{text[: limit - tail - 3]}...{text[-tail:]}"


def new_error_id() -> str:
    """An id that joins what a caller was told to the log line with the details."""
    return uuid.uuid4().hex


def _status(
    code: int, message: str, reason: str, metadata: Mapping[str, str], *extra: Message
) -> status_pb2.Status:
    info = rich_status.error_info(reason, DOMAIN, {k: clip(v) for k, v in metadata.items()})
    return rich_status.status(code, _cut_middle(message, MAX_MESSAGE_CHARS), [info, *extra])


def bad_request(violations: list[FieldViolation]) -> grpc.Status:
    """INVALID_ARGUMENT with a BadRequest naming each bad field (the first
    MAX_VIOLATIONS of them; the message counts the rest)."""
    return rich_status.to_grpc_status(_bad_request(violations))


def _bad_request(violations: list[FieldViolation]) -> status_pb2.Status:
    shown = [
        FieldViolation(clip(v.field), _cut_middle(v.description, MAX_DESCRIPTION_CHARS))
        for v in violations[:MAX_VIOLATIONS]
    ]
    detail = rich_status.bad_request(shown)
    message = "invalid request: " + "; ".join(f"{v.field} {v.description}" for v in shown)
    if len(violations) > MAX_VIOLATIONS:
        message += f"; and {len(violations) - MAX_VIOLATIONS} more"
    return _status(code_pb2.INVALID_ARGUMENT, message, "INVALID_REQUEST", {}, detail)


def internal(error_id: str) -> grpc.Status:
    """INTERNAL with nothing but the error id under which the log has the details."""
    return rich_status.to_grpc_status(_internal(error_id))


def _internal(error_id: str) -> status_pb2.Status:
    return _status(
        code_pb2.INTERNAL,
        f"{INTERNAL_MESSAGE} (error id {error_id})",
        "INTERNAL",
        {"errorId": error_id},
    )


def to_status(error: JobServiceError, error_id: str) -> grpc.Status:
    """The status a caller gets for `error`; `error_id` names it where the log
    holds details a caller must not see (storage and unexpected errors)."""
    return rich_status.to_grpc_status(to_rich_status(error, error_id))


def to_rich_status(error: JobServiceError, error_id: str) -> status_pb2.Status:
    """`to_status` as the google.rpc.Status message itself (a BatchEnqueue item's
    error is one, inside the response)."""
    match error:
        case InvalidRequestError():
            return _bad_request(error.violations)
        case DuplicateJobError():
            job_id = clip(error.existing_job_id)
            return _status(
                code_pb2.ALREADY_EXISTS,
                f"an active job already exists for this job type and target: {job_id}",
                "DUPLICATE_JOB",
                {"existingJobId": job_id},
            )
        case JobNotFoundError():
            job_id = clip(error.job_id)
            return _status(
                code_pb2.NOT_FOUND, f"job {job_id} not found", "JOB_NOT_FOUND", {"jobId": job_id}
            )
        case InvalidJobStateError():
            return _status(
                code_pb2.FAILED_PRECONDITION,
                str(error),  # the job's id and status, from the database
                "INVALID_JOB_STATE",
                {"jobId": error.job_id, "status": error.status},
            )
        case UnauthenticatedError():
            return _status(
                code_pb2.UNAUTHENTICATED,
                "a valid bearer token is required (metadata authorization: Bearer TOKEN)",
                "UNAUTHENTICATED",
                {},
            )
        case PermissionDeniedError():
            return _status(
                code_pb2.PERMISSION_DENIED,
                str(error),
                "PERMISSION_DENIED",
                {"rpc": error.rpc, "role": error.role},
            )
        case CursorExpiredError():
            return _status(
                code_pb2.FAILED_PRECONDITION,
                clip(str(error)),
                "CURSOR_EXPIRED",
                {"oldestCursor": error.oldest_cursor, "afterCursor": clip(error.after_cursor)},
            )
        case ScheduleNotFoundError() | ScheduleExistsError():
            return _schedule_status(error)
        case QuotaExceededError():  # every per-tenant cap: pending jobs, schedules
            # The cap is named (ErrorInfo metadata `cap`, QuotaFailure's description).
            return _status(
                code_pb2.RESOURCE_EXHAUSTED,
                clip(str(error), MAX_MESSAGE_CHARS),
                "QUOTA_EXCEEDED",
                {"cap": error.cap, "limit": str(error.limit)},
                rich_status.quota_failure(
                    f"caller:{clip(error.tenant)}", f"{error.cap}: at most {error.limit}"
                ),
            )
        case PruneRunningError():
            # ABORTED, not FAILED_PRECONDITION: nothing is wrong with the request or the
            # system, it lost a race with another prune and may simply retry later.
            return _status(code_pb2.ABORTED, str(error), "PRUNE_RUNNING", {})
        case StorageUnavailableError():
            return _status(
                code_pb2.UNAVAILABLE,
                f"{UNAVAILABLE_MESSAGE} (error id {error_id})",
                "STORAGE_UNAVAILABLE",
                {"errorId": error_id},
            )
        case StorageDataError():
            return _status(
                code_pb2.INVALID_ARGUMENT,
                f"{REFUSED_VALUE_MESSAGE} (error id {error_id})",
                "VALUE_REFUSED",
                {"errorId": error_id},
            )
        case _:
            return _internal(error_id)


def _schedule_status(error: ScheduleNotFoundError | ScheduleExistsError) -> status_pb2.Status:
    """A schedule RPC's refusal (NOT_FOUND, ALREADY_EXISTS)."""
    match error:
        case ScheduleNotFoundError():
            schedule_id = clip(error.schedule_id)
            return _status(
                code_pb2.NOT_FOUND,
                f"schedule {schedule_id} not found",
                "SCHEDULE_NOT_FOUND",
                {"scheduleId": schedule_id},
            )
        case _:
            return _status(
                code_pb2.ALREADY_EXISTS,
                clip(str(error)),
                "SCHEDULE_EXISTS",
                {"scheduleId": clip(error.schedule_id)},
            )


def item_status(rpc: str, error: JobServiceError) -> status_pb2.Status:
    """The status of one item of a batch call that failed alone (`rpc` names the
    item in the log, as "BatchEnqueue requests[3]"): logged as a whole call's error
    would be, under the error id the status gives."""
    error_id = new_error_id()
    _log(rpc, error, error_id)
    return to_rich_status(error, error_id)


def _log(rpc: str, error: BaseException, error_id: str) -> None:
    """Log what a caller was not told, under `error_id`: the details, and the stack of
    anything that is not a plain outage or a caller's mistake."""
    match error:
        case InvalidRequestError() | DuplicateJobError() | JobNotFoundError():
            return
        case InvalidJobStateError() | UnauthenticatedError() | PermissionDeniedError():
            return
        case PruneRunningError() | CursorExpiredError() | QuotaExceededError():
            return
        case ScheduleNotFoundError() | ScheduleExistsError():
            return
        case StorageUnavailableError() | StorageDataError():
            log.error("%s failed: error_id=%s %s", rpc, error_id, error)
        case _:
            log.error(
                "%s failed: error_id=%s unexpected %s: %s",
                rpc,
                error_id,
                type(error).__name__,
                error,
                exc_info=error,
            )


async def _abort(
    rpc: str, error: BaseException, context: grpc.aio.ServicerContext[Any, Any]
) -> None:
    error_id = new_error_id()
    _log(rpc, error, error_id)
    status = (
        to_status(error, error_id) if isinstance(error, JobServiceError) else internal(error_id)
    )
    # grpc-stubs lacks the aio context's abort_with_status.
    await context.abort_with_status(status)  # type: ignore[attr-defined]


async def abort(
    rpc: str, error: BaseException, context: grpc.aio.ServicerContext[Any, Any]
) -> None:
    """End the call with the status mapped from `error` (for code outside a handler
    decorated with unary_errors/stream_errors, such as an interceptor)."""
    await _abort(rpc, error, context)


Unary = Callable[[Any, Req, grpc.aio.ServicerContext[Any, Any]], Awaitable[Resp]]
Streaming = Callable[[Any, Req, grpc.aio.ServicerContext[Any, Any]], AsyncIterator[Resp]]


def unary_errors(handler: Unary[Req, Resp]) -> Unary[Req, Resp]:
    """Abort with the mapped status when the handler raises, whatever it raises."""

    @functools.wraps(handler)
    async def wrapper(self: Any, request: Req, context: grpc.aio.ServicerContext[Any, Any]) -> Resp:
        try:
            return await handler(self, request, context)
        except grpc.aio.AbortError:
            raise  # the handler chose its status itself
        except Exception as error:
            await _abort(handler.__name__, error, context)
            raise AssertionError("unreachable") from None

    return wrapper


def stream_errors(handler: Streaming[Req, Resp]) -> Streaming[Req, Resp]:
    """Like unary_errors, for a server-streaming handler."""

    @functools.wraps(handler)
    async def wrapper(
        self: Any, request: Req, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Resp]:
        try:
            async for item in handler(self, request, context):
                yield item
        except grpc.aio.AbortError:
            raise
        except Exception as error:
            await _abort(handler.__name__, error, context)

    return wrapper
