"""Typed exceptions for JobService errors, and the one place that builds them.

JobService reports failures with the rich error model: a ``google.rpc.Status`` in the
``grpc-status-details-bin`` trailer carrying an ``ErrorInfo`` (domain ``jobs.san``) and,
where they apply, ``BadRequest`` or ``RetryInfo``. :func:`error_from_rpc` turns a
``grpc.RpcError`` (sync or asyncio) into one of these::

    JobsError                      any JobService failure (code, message, reason, metadata)
    ├── DuplicateJobError          ALREADY_EXISTS / DUPLICATE_JOB: .existing_job_id
    ├── JobNotFoundError           NOT_FOUND: .job_id
    │   └── ScheduleNotFoundError  NOT_FOUND / SCHEDULE_NOT_FOUND: .schedule_id
    ├── ScheduleExistsError        ALREADY_EXISTS / SCHEDULE_EXISTS: .schedule_id
    ├── InvalidRequestError        INVALID_ARGUMENT: .field_violations
    ├── InvalidJobStateError       FAILED_PRECONDITION / INVALID_JOB_STATE: .job_id, .status
    ├── CursorExpiredError         FAILED_PRECONDITION / CURSOR_EXPIRED: .oldest_cursor
    ├── RateLimitedError           RESOURCE_EXHAUSTED: .retry_delay (seconds or None)
    ├── UnauthenticatedError       UNAUTHENTICATED: no token, or one the server refuses
    ├── PermissionDeniedError      PERMISSION_DENIED: the caller's role may not do this
    ├── ServiceUnavailableError    UNAVAILABLE (server down or unreachable), DEADLINE_EXCEEDED
    └── WaitTimeoutError           wait()/watch() gave up before the job was terminal
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2

_DETAILS_KEY = "grpc-status-details-bin"
ERROR_DOMAIN = "jobs.san"
_CODES = {code.value[0]: code for code in grpc.StatusCode}  # google.rpc.Status.code -> enum


@dataclass(frozen=True, slots=True)
class FieldViolation:
    """One bad field of a request, as named by the server's ``BadRequest`` detail."""

    field: str
    description: str


class JobsError(Exception):
    """A JobService call failed.

    ``code`` is the gRPC status code; ``reason`` and ``metadata`` come from the
    ``ErrorInfo`` detail when the server sent one (empty otherwise).
    """

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode = grpc.StatusCode.UNKNOWN,
        reason: str = "",
        metadata: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = reason
        self.metadata: dict[str, str] = dict(metadata or {})

    def __str__(self) -> str:
        return self.message


class DuplicateJobError(JobsError):
    """An active job already exists for the same (job_type, target_id)."""

    @property
    def existing_job_id(self) -> str:
        return self.metadata.get("existingJobId", "")


class JobNotFoundError(JobsError):
    """No job has the given id."""

    @property
    def job_id(self) -> str:
        return self.metadata.get("jobId", "")


class ScheduleNotFoundError(JobNotFoundError):
    """The caller has no schedule of the given id. A JobNotFoundError too, as every
    NOT_FOUND was before schedules existed (code catching that still catches this)."""

    @property
    def schedule_id(self) -> str:
        return self.metadata.get("scheduleId", "")


class ScheduleExistsError(JobsError):
    """CreateSchedule with an id the caller already uses for another definition."""

    @property
    def schedule_id(self) -> str:
        return self.metadata.get("scheduleId", "")


class InvalidRequestError(JobsError):
    """The request was rejected as invalid; ``field_violations`` names each bad field."""

    def __init__(
        self,
        message: str,
        *,
        field_violations: Iterable[FieldViolation] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.field_violations: tuple[FieldViolation, ...] = tuple(field_violations)


class InvalidJobStateError(JobsError):
    """The job's status does not allow the operation (e.g. cancelling a finished job)."""

    @property
    def job_id(self) -> str:
        return self.metadata.get("jobId", "")

    @property
    def status(self) -> str:
        return self.metadata.get("status", "")


class CursorExpiredError(JobsError):
    """StreamJobChanges' ``after_cursor`` is older than the changes JobService keeps:
    changes were lost to the consumer. ``oldest_cursor`` is where the kept ones begin
    (resume from "" to read them); ``after_cursor`` echoes the cursor given."""

    @property
    def oldest_cursor(self) -> str:
        return self.metadata.get("oldestCursor", "")

    @property
    def after_cursor(self) -> str:
        return self.metadata.get("afterCursor", "")


class RateLimitedError(JobsError):
    """Too many requests; ``retry_delay`` (seconds) says when to try again, if known."""

    def __init__(self, message: str, *, retry_delay: float | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_delay = retry_delay


class UnauthenticatedError(JobsError):
    """The server does not know the caller: no token, or a bad or revoked one."""


class PermissionDeniedError(JobsError):
    """The caller is known, but its role does not allow this call."""


class ServiceUnavailableError(JobsError):
    """JobService could not be reached, or did not answer in time."""


class WaitTimeoutError(JobsError, TimeoutError):
    """``wait``/``watch`` reached its timeout before the job became terminal."""


def _status_from_trailers(trailers: Iterable[Any] | None) -> status_pb2.Status:
    status = status_pb2.Status()
    for key, value in trailers or ():  # (key, value) pairs, sync or aio metadata
        if key == _DETAILS_KEY and isinstance(value, bytes):
            status.ParseFromString(value)
            break
    return status


def error_from_status(
    code: grpc.StatusCode,
    message: str,
    trailers: Iterable[Any] | None = None,
) -> JobsError:
    """Build the typed exception for a status code, message and trailing metadata.

    The rich details are read from the ``grpc-status-details-bin`` trailer, which is
    what ``grpc_status.rpc_status.from_call`` reads too; reading it directly serves the
    sync and the asyncio client alike.
    """
    return _error_from_details(code, message, _status_from_trailers(trailers))


def error_from_status_message(status: status_pb2.Status) -> JobsError:
    """Build the typed exception for a ``google.rpc.Status`` message as such (one
    item's error inside a BatchEnqueue answer), the same way as for a failed call."""
    code = _CODES.get(status.code, grpc.StatusCode.UNKNOWN)
    return _error_from_details(code, status.message, status)


def _error_from_details(
    code: grpc.StatusCode, message: str, status: status_pb2.Status
) -> JobsError:
    message = status.message or message or code.name
    reason = ""
    metadata: dict[str, str] = {}
    violations: list[FieldViolation] = []
    retry_delay: float | None = None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason = info.reason
            metadata = dict(info.metadata)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            violations.extend(FieldViolation(v.field, v.description) for v in bad.field_violations)
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            retry_delay = retry.retry_delay.ToTimedelta().total_seconds()

    common: dict[str, Any] = {"code": code, "reason": reason, "metadata": metadata}
    if reason == "SCHEDULE_NOT_FOUND":
        return ScheduleNotFoundError(message, **common)
    if reason == "SCHEDULE_EXISTS":
        return ScheduleExistsError(message, **common)
    if code is grpc.StatusCode.ALREADY_EXISTS or reason == "DUPLICATE_JOB":
        return DuplicateJobError(message, **common)
    if code is grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidRequestError(message, field_violations=violations, **common)
    if reason == "CURSOR_EXPIRED":
        return CursorExpiredError(message, **common)
    if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
        return RateLimitedError(message, retry_delay=retry_delay, **common)
    return _BY_CODE.get(code, JobsError)(message, **common)


# The exception of each code that needs nothing but the ErrorInfo (see above for the rest).
_BY_CODE: dict[grpc.StatusCode, type[JobsError]] = {
    grpc.StatusCode.NOT_FOUND: JobNotFoundError,
    grpc.StatusCode.FAILED_PRECONDITION: InvalidJobStateError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNAVAILABLE: ServiceUnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: ServiceUnavailableError,
}


def error_from_rpc(error: grpc.RpcError) -> JobsError:
    """Turn a ``grpc.RpcError`` (or ``grpc.aio.AioRpcError``) into a typed exception."""
    if isinstance(error, grpc.aio.AioRpcError):
        return error_from_status(error.code(), error.details() or "", error.trailing_metadata())
    if isinstance(error, grpc.Call):
        return error_from_status(error.code(), error.details() or "", error.trailing_metadata())
    return JobsError(str(error) or "gRPC call failed")


def status_from_error(error: JobsError) -> status_pb2.Status:
    """The ``google.rpc.Status`` a server sends for ``error``, the inverse of
    :func:`error_from_status_message` (the testing fake answers with it)."""
    status = status_pb2.Status(code=error.code.value[0], message=error.message)
    details: list[Any] = []
    if error.reason or error.metadata:
        details.append(
            error_details_pb2.ErrorInfo(
                reason=error.reason, domain=ERROR_DOMAIN, metadata=error.metadata
            )
        )
    if isinstance(error, InvalidRequestError) and error.field_violations:
        bad = error_details_pb2.BadRequest()
        for violation in error.field_violations:
            bad.field_violations.add(field=violation.field, description=violation.description)
        details.append(bad)
    if isinstance(error, RateLimitedError) and error.retry_delay is not None:
        delay = duration_pb2.Duration()
        delay.FromNanoseconds(round(error.retry_delay * 1e9))
        details.append(error_details_pb2.RetryInfo(retry_delay=delay))
    for detail in details:
        packed = any_pb2.Any()
        packed.Pack(detail)
        status.details.append(packed)
    return status


def rpc_error_from(error: JobsError) -> grpc.aio.AioRpcError:
    """The failed call a server's ``error`` makes on a grpc.aio channel: its code and
    message, and the rich status in the trailers (what :func:`error_from_rpc` reads)."""
    trailers = grpc.aio.Metadata((_DETAILS_KEY, status_from_error(error).SerializeToString()))
    return grpc.aio.AioRpcError(
        error.code, grpc.aio.Metadata(), trailers, details=error.message, debug_error_string=None
    )
