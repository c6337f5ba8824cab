"""The AiGateway port over the unary RPCs, and what every gateway client shares:
the channel, the request built from a job's stored input, the wait for a
connection, and grpc errors turned into GatewayCallError (with the ErrorInfo
reason and RetryInfo delay) at this boundary. gateway_stream.py carries the same
calls over StreamCalls."""

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


def retry_details(status: status_pb2.Status) -> tuple[str, float | None]:
    """The ErrorInfo reason ("" without one) and RetryInfo delay of a rich status."""
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


def to_gateway_error(error: grpc.aio.AioRpcError, timeout: float | None) -> GatewayCallError:
    reason = ""
    delay: float | None = None
    trailers: Sequence[tuple[str, str | bytes]] = error.trailing_metadata() or ()  # type: ignore[assignment]
    for key, value in trailers:
        if key == _STATUS_DETAILS_KEY and isinstance(value, bytes):
            status = status_pb2.Status.FromString(value)
            reason, delay = retry_details(status)
    return GatewayCallError(
        code=error.code().name,
        reason=reason,
        message=error.details() or "",
        retry_delay_seconds=delay,
        deadline_seconds=timeout,
    )


# Per job type: the unary method's name on the stub, its request message, and the
# field of the StreamCalls oneofs (request and result) that carries it.
_KINDS: dict[JobType, tuple[str, type[Message], str]] = {
    JobType.CARD_ANALYSIS: ("AnalyzeContent", gw.AnalyzeContentRequest, "analyze_content"),
    JobType.TIL_GENERATION: ("GenerateTil", gw.GenerateTilRequest, "generate_til"),
    JobType.RECALL_GENERATION: ("GenerateRecall", gw.GenerateRecallRequest, "generate_recall"),
}


def stream_field(job_type: JobType) -> str:
    """The StreamedCall/StreamedCallResult oneof field for `job_type`."""
    return _KINDS[job_type][2]


def gateway_request(job: Job) -> Message:
    """The gateway request for a job, from its stored input."""
    # ParseDict / MessageToDict semantics, built field by field (see convert.py).
    return message_from_dict(_KINDS[job.job_type][1], job.request_params)


def open_channel(address: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)


async def wait_connected(channel: grpc.aio.Channel, address: str, deadline: float) -> None:
    """Wait (briefly) for a usable connection. Failing fast on a channel that is
    between reconnect attempts would fail jobs retried just after the gateway came
    back; waiting for the whole deadline would report a down gateway as a timeout.
    So: up to CONNECT_TIMEOUT, then UNAVAILABLE."""
    if channel.get_state(try_to_connect=True) == grpc.ChannelConnectivity.READY:
        return
    wait = min(CONNECT_TIMEOUT, deadline)
    try:
        await asyncio.wait_for(channel.channel_ready(), wait)
    except TimeoutError:
        raise GatewayCallError(
            code="UNAVAILABLE",
            reason="",
            message=f"cannot connect to {address} (no connection within {wait:g}s)",
            deadline_seconds=deadline,
        ) from None


class GrpcAiGateway:
    """Implements the `AiGateway` port with the unary RPCs, one call per job."""

    def __init__(self, address: str, channel: grpc.aio.Channel | None = None) -> None:
        """With `channel`, calls go over it and `close()` leaves it open (its owner
        closes it)."""
        self.address = address
        self._owns_channel = channel is None
        self._channel = channel or open_channel(address)
        self._stub = gw_grpc.AiGatewayServiceStub(self._channel)

    async def close(self) -> None:
        if self._owns_channel:
            await self._channel.close(None)

    async def run(self, job: Job, deadline: float) -> JsonDict:
        started = time.monotonic()
        await wait_connected(self._channel, self.address, deadline)
        timeout = max(deadline - (time.monotonic() - started), 0.001)
        method: Callable[..., Awaitable[Message]] = getattr(self._stub, _KINDS[job.job_type][0])
        metadata = (
            ("x-client-id", CLIENT_ID),
            ("x-job-id", job.id),
            ("x-attempt", str(job.attempt_count)),
        )
        try:
            response = await method(gateway_request(job), timeout=timeout, metadata=metadata)
        except grpc.aio.AioRpcError as error:
            raise to_gateway_error(error, deadline) from None
        return message_to_dict(response)
