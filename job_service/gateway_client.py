"""The AiGateway port over gRPC: builds the gateway request from a job's stored
input, calls it with the job's deadline, and turns grpc errors into
GatewayCallError (with the ErrorInfo reason and RetryInfo delay) at this boundary."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from san.aigateway.v1 import ai_gateway_pb2 as gw
from san.aigateway.v1 import ai_gateway_pb2_grpc as gw_grpc

from job_service.domain.failures import GatewayCallError
from job_service.domain.model import Job, JobType, JsonDict
from job_service.transport.convert import message_from_dict, message_to_dict

log = logging.getLogger(__name__)

CLIENT_ID = "job-service"
# How long a call waits for the gateway's connection before it counts as unavailable.
CONNECT_TIMEOUT = 3.0
_STATUS_DETAILS_KEY = "grpc-status-details-bin"

CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 0),
    ("grpc.max_receive_message_length", 16 * 1024 * 1024),
    # A long error message travels percent-encoded in the grpc-message header (and
    # again in grpc-status-details-bin): allow big ones rather than lose the reason.
    ("grpc.max_metadata_size", 1024 * 1024),
    # Reconnect quickly once a stopped gateway is back.
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 1_000),
    ("grpc.enable_retries", 0),
]


def _retry_details(status: status_pb2.Status) -> tuple[str, float | None]:
    reason = ""
    delay: float | None = None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason = info.reason
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            delay = retry.retry_delay.ToTimedelta().total_seconds()
    return reason, delay


def to_gateway_error(error: grpc.aio.AioRpcError, timeout: float) -> GatewayCallError:
    reason = ""
    delay: float | None = None
    trailers: Sequence[tuple[str, str | bytes]] = error.trailing_metadata() or ()  # type: ignore[assignment]
    for key, value in trailers:
        if key == _STATUS_DETAILS_KEY and isinstance(value, bytes):
            status = status_pb2.Status.FromString(value)
            reason, delay = _retry_details(status)
    return GatewayCallError(
        code=error.code().name,
        reason=reason,
        message=error.details() or "",
        retry_delay_seconds=delay,
        deadline_seconds=timeout,
    )


class GrpcAiGateway:
    """Implements the `AiGateway` port with one shared channel."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._channel = grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
        self._stub = gw_grpc.AiGatewayServiceStub(self._channel)

    async def close(self) -> None:
        await self._channel.close(None)

    def _call(self, job_type: JobType) -> tuple[Callable[..., Awaitable[Message]], type[Message]]:
        match job_type:
            case JobType.CARD_ANALYSIS:
                return self._stub.AnalyzeContent, gw.AnalyzeContentRequest
            case JobType.TIL_GENERATION:
                return self._stub.GenerateTil, gw.GenerateTilRequest
            case JobType.RECALL_GENERATION:
                return self._stub.GenerateRecall, gw.GenerateRecallRequest

    async def _connected(self, deadline: float) -> None:
        """Wait (briefly) for a usable connection. Failing fast on a channel that is
        between reconnect attempts would fail jobs retried just after the gateway
        came back; waiting for the whole deadline would report a down gateway as a
        timeout. So: up to CONNECT_TIMEOUT, then UNAVAILABLE."""
        if self._channel.get_state(try_to_connect=True) == grpc.ChannelConnectivity.READY:
            return
        wait = min(CONNECT_TIMEOUT, deadline)
        try:
            await asyncio.wait_for(self._channel.channel_ready(), wait)
        except TimeoutError:
            raise GatewayCallError(
                code="UNAVAILABLE",
                reason="",
                message=f"cannot connect to {self.address} (no connection within {wait:g}s)",
                deadline_seconds=deadline,
            ) from None

    async def run(self, job: Job, deadline: float) -> JsonDict:
        started = time.monotonic()
        await self._connected(deadline)
        timeout = max(deadline - (time.monotonic() - started), 0.001)
        method, request_type = self._call(job.job_type)
        # ParseDict / MessageToDict semantics, built field by field (see convert.py).
        request = message_from_dict(request_type, job.request_params)
        metadata = (
            ("x-client-id", CLIENT_ID),
            ("x-job-id", job.id),
            ("x-attempt", str(job.attempt_count)),
        )
        try:
            response = await method(request, timeout=timeout, metadata=metadata)
        except grpc.aio.AioRpcError as error:
            raise to_gateway_error(error, deadline) from None
        return message_to_dict(response)
