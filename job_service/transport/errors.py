"""The one place where the service's exceptions become gRPC statuses with rich
details (google.rpc.Status: ErrorInfo in domain `jobs.san`, BadRequest)."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from job_service.domain.errors import (
    DuplicateJobError,
    FieldViolation,
    InvalidJobStateError,
    InvalidRequestError,
    JobNotFoundError,
    JobServiceError,
    StorageUnavailableError,
)

log = logging.getLogger(__name__)

DOMAIN = "jobs.san"
Req = TypeVar("Req")
Resp = TypeVar("Resp")


def _status(
    code: int, message: str, reason: str, metadata: Mapping[str, str], *extra: Any
) -> grpc.Status:
    status = status_pb2.Status(code=code, message=message)
    info = any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN, metadata=dict(metadata)))
    status.details.append(info)
    for detail in extra:
        packed = any_pb2.Any()
        packed.Pack(detail)
        status.details.append(packed)
    return rpc_status.to_status(status)


def bad_request(violations: list[FieldViolation]) -> grpc.Status:
    detail = error_details_pb2.BadRequest(
        field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=v.field, description=v.description)
            for v in violations
        ]
    )
    message = "invalid request: " + "; ".join(f"{v.field} {v.description}" for v in violations)
    return _status(code_pb2.INVALID_ARGUMENT, message, "INVALID_REQUEST", {}, detail)


def to_status(error: JobServiceError) -> grpc.Status:
    match error:
        case InvalidRequestError():
            return bad_request(error.violations)
        case DuplicateJobError():
            return _status(
                code_pb2.ALREADY_EXISTS,
                str(error),
                "DUPLICATE_JOB",
                {"existingJobId": error.existing_job_id},
            )
        case JobNotFoundError():
            return _status(code_pb2.NOT_FOUND, str(error), "JOB_NOT_FOUND", {"jobId": error.job_id})
        case InvalidJobStateError():
            return _status(
                code_pb2.FAILED_PRECONDITION,
                str(error),
                "INVALID_JOB_STATE",
                {"jobId": error.job_id, "status": error.status},
            )
        case StorageUnavailableError():
            return _status(code_pb2.UNAVAILABLE, str(error), "STORAGE_UNAVAILABLE", {})
        case _:
            return _status(code_pb2.INTERNAL, str(error), "INTERNAL", {})


Unary = Callable[[Any, Req, grpc.aio.ServicerContext[Any, Any]], Awaitable[Resp]]
Streaming = Callable[[Any, Req, grpc.aio.ServicerContext[Any, Any]], AsyncIterator[Resp]]


def unary_errors(handler: Unary[Req, Resp]) -> Unary[Req, Resp]:
    """Abort with the mapped status when the handler raises one of our errors."""

    @functools.wraps(handler)
    async def wrapper(self: Any, request: Req, context: grpc.aio.ServicerContext[Any, Any]) -> Resp:
        try:
            return await handler(self, request, context)
        except JobServiceError as error:
            if isinstance(error, StorageUnavailableError):
                log.error("%s: %s", handler.__name__, error)
            # grpc-stubs lacks the aio context's abort_with_status.
            await context.abort_with_status(to_status(error))  # type: ignore[attr-defined]
            raise AssertionError("unreachable") from None

    return wrapper


def stream_errors(handler: Streaming[Req, Resp]) -> Streaming[Req, Resp]:
    @functools.wraps(handler)
    async def wrapper(
        self: Any, request: Req, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Resp]:
        try:
            async for item in handler(self, request, context):
                yield item
        except JobServiceError as error:
            await context.abort_with_status(to_status(error))  # type: ignore[attr-defined]

    return wrapper
