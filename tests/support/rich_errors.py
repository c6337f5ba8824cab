"""Read the google.rpc.Status details of a failed call, for assertions."""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc
from google.rpc import error_details_pb2, status_pb2


@dataclass
class RichError:
    code: grpc.StatusCode
    message: str
    reason: str = ""
    domain: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    field_violations: dict[str, str] = field(default_factory=dict)
    retry_delay: float | None = None
    quota_violations: list[str] = field(default_factory=list)


def rich_error(error: grpc.aio.AioRpcError) -> RichError:
    result = RichError(error.code(), error.details() or "")
    for key, value in error.trailing_metadata() or ():
        if key != "grpc-status-details-bin" or not isinstance(value, bytes):
            continue
        status = status_pb2.Status.FromString(value)
        assert status.code == error.code().value[0], "status detail must match the call's code"
        _read_details(status, result)
    return result


def status_error(status: status_pb2.Status) -> RichError:
    """A google.rpc.Status message itself (a BatchEnqueue item's error), read as
    `rich_error` reads a failed call's."""
    code = next(c for c in grpc.StatusCode if c.value[0] == status.code)
    result = RichError(code, status.message)
    _read_details(status, result)
    return result


def _read_details(status: status_pb2.Status, result: RichError) -> None:
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            result.reason, result.domain, result.metadata = (
                info.reason,
                info.domain,
                dict(info.metadata),
            )
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            result.field_violations = {v.field: v.description for v in bad.field_violations}
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            result.retry_delay = retry.retry_delay.ToTimedelta().total_seconds()
        elif detail.Is(error_details_pb2.QuotaFailure.DESCRIPTOR):
            quota = error_details_pb2.QuotaFailure()
            detail.Unpack(quota)
            result.quota_violations = [v.subject for v in quota.violations]
