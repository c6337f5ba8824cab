"""The AiGateway port over the unary RPCs, and what every gateway client shares:
the channel, the request built from a job's stored input, the wait for a
connection, and grpc errors turned into GatewayCallError (with the ErrorInfo
reason and RetryInfo delay) at this boundary. gateway_stream.py carries the same
calls over StreamCalls."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2

from san_jobs.job_service.domain.failures import REQUEST_TOO_LARGE, GatewayCallError
from san_jobs.job_service.domain.job_types import JOB_TYPES
from san_jobs.job_service.domain.limits import DEFAULT_MAX_MESSAGE_BYTES, MAX_RESULT_BYTES
from san_jobs.job_service.domain.model import AttemptUsage, GatewayAnswer, Job, JobType
from san_jobs.job_service.domain.ports import UnreachableHook, WatchesConnection
from san_jobs.job_service.message_dicts import message_from_dict, message_to_dict
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2 as gw
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2_grpc as gw_grpc
from san_jobs.shared.trace_context import outgoing_metadata

log = logging.getLogger("job_service.gateway_client")

CLIENT_ID = "job-service"
# A call waits for the gateway's connection as long as its deadline allows (see
# wait_connected). Within one connection attempt that hangs (MIN_CONNECT_TIMEOUT_MS),
# the reconnect backoff after it (at most MAX_RECONNECT_BACKOFF_MS, plus grpc's 20 %
# jitter) and the new attempt's handshake, a gateway that is back is found.
MIN_CONNECT_TIMEOUT_MS = 2_000
MAX_RECONNECT_BACKOFF_MS = 1_000
_STATUS_DETAILS_KEY = "grpc-status-details-bin"

# A gateway call's request may exceed JobService's own --max-message-bytes by this
# much (the call's envelope: ids, timeout, field tags); a bigger one is never sent.
CALL_OVERHEAD_BYTES = 64 * 1024

CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 0),
    ("grpc.max_receive_message_length", 16 * 1024 * 1024),
    # A long error message travels percent-encoded in the grpc-message header (and
    # again in grpc-status-details-bin): allow big ones rather than lose the reason.
    ("grpc.max_metadata_size", 1024 * 1024),
    # Reconnect quickly once a stopped gateway is back: backoff between attempts
    # grows from 200 ms to at most 1 s. grpc's min_reconnect_backoff_ms is in fact the
    # shortest time one connection attempt may take before it is given up (default
    # 20 s): an attempt made while the gateway's host was unreachable (a handshake
    # that never completes) would otherwise hold the channel for 20 s after the
    # gateway is back, failing the jobs sent meanwhile as UNAVAILABLE.
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
    ("grpc.min_reconnect_backoff_ms", MIN_CONNECT_TIMEOUT_MS),
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
            # Plain arithmetic, not ToTimedelta(): a Duration of 2**63 s overflows a
            # timedelta. The value is untrusted; BackoffPolicy bounds it.
            delay = retry.retry_delay.seconds + retry.retry_delay.nanos / 1e9
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


_GATEWAY_METHODS = gw.DESCRIPTOR.services_by_name["AiGatewayService"].methods_by_name

# Per job type (its registry entry, domain/job_types.py): the unary method's name on
# the stub, its request message (found in the generated descriptors), and the field
# of the StreamCalls oneofs (request and result) that carries it.
_KINDS: dict[JobType, tuple[str, type[Message], str]] = {
    job_type: (
        spec.gateway_method,
        message_factory.GetMessageClass(_GATEWAY_METHODS[spec.gateway_method].input_type),
        spec.gateway_field,
    )
    for job_type, spec in JOB_TYPES.items()
}


def stream_field(job_type: JobType) -> str:
    """The StreamedCall/StreamedCallResult oneof field for `job_type`."""
    return _KINDS[job_type][2]


def gateway_request(job: Job) -> Message:
    """The gateway request for a job, from its stored input."""
    # The request carries the input's fields under the same names (job_types.py);
    # ParseDict semantics, built field by field (see message_dicts.py).
    return message_from_dict(_KINDS[job.job_type][1], job.request_params)


def max_call_bytes(max_message_bytes: int) -> int:
    """The largest gateway call JobService sends, for its --max-message-bytes."""
    return max_message_bytes + CALL_OVERHEAD_BYTES


def check_call_size(size: int, limit: int, deadline: float) -> None:
    """Refuse a call whose request is `size` bytes when the limit is `limit`: the
    job fails alone, for good, before anything is sent (a message over a limit
    would break the stream every other call shares, or be refused again on retry)."""
    if size <= limit:
        return
    raise GatewayCallError(
        code="INVALID_ARGUMENT",
        reason=REQUEST_TOO_LARGE,
        message=(
            f"Request too large for the AI gateway: {size:,} bytes, more than the "
            f"{limit:,} bytes allowed (--max-message-bytes plus "
            f"{CALL_OVERHEAD_BYTES // 1024} KiB); it was not sent"
        ),
        deadline_seconds=deadline,
    )


# The answer field that carries the call's usage (every answer message has it). It
# is not the job's result: the stored result holds the result message's fields only.
USAGE_FIELD = "usage"


def answer_usage(answer: Message) -> AttemptUsage | None:
    """The usage the gateway reported with `answer` (None: a gateway that reports
    none), and `answer` left without it."""
    if USAGE_FIELD not in answer.DESCRIPTOR.fields_by_name or not answer.HasField(USAGE_FIELD):
        return None
    usage: gw.Usage = getattr(answer, USAGE_FIELD)
    reported = AttemptUsage(
        model=usage.model,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        duration_seconds=usage.duration.seconds + usage.duration.nanos / 1e9,
        cached=usage.cached,
    )
    answer.ClearField(USAGE_FIELD)
    return reported


def checked_answer(answer: Message, deadline: float | None) -> GatewayAnswer:
    """The gateway's answer as the job will store it, with its usage apart, or a
    permanent failure when it is larger than MAX_RESULT_BYTES: an untrusted answer
    must not make a job too big for any response to carry."""
    usage = answer_usage(answer)
    size = answer.ByteSize()
    if size > MAX_RESULT_BYTES:
        raise GatewayCallError(
            code="INTERNAL",
            reason="MALFORMED_RESPONSE",
            message=(
                f"The AI gateway's answer is too large to store: {size:,} bytes, more than "
                f"the {MAX_RESULT_BYTES:,} bytes allowed"
            ),
            deadline_seconds=deadline,
        )
    return GatewayAnswer(message_to_dict(answer), usage)


def caller_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """What every gateway call (unary or StreamCalls) says about its caller: the
    bearer token that authenticates this service (the gateway's
    --caller-tokens-file), and x-client-id, a label for the gateway's call log."""
    label = (("x-client-id", CLIENT_ID),)
    return label if token is None else (("authorization", f"Bearer {token}"), *label)


def open_channel(
    address: str, credentials: grpc.ChannelCredentials | None = None
) -> grpc.aio.Channel:
    """The channel to the gateway: over TLS with `credentials` (san_jobs.shared.tls.
    channel_credentials), in plain text without."""
    if credentials is None:
        return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
    return grpc.aio.secure_channel(address, credentials, options=CHANNEL_OPTIONS)


# A call that has waited this long for a connection tells `on_unreachable` (the
# dispatch breaker pauses its type at once, issue 42 point 7): an outage is seen within
# seconds, not when the first call's deadline (30 s by default) has passed. Long enough
# for a gateway's restart or a reconnect between two attempts (well under a second
# here) not to pause anything.
UNREACHABLE_AFTER = 3.0


async def wait_connected(
    channel: grpc.aio.Channel,
    address: str,
    wait: float,
    deadline: float,
    on_unreachable: Callable[[str], Awaitable[None]] | None = None,
    unreachable_after: float = UNREACHABLE_AFTER,
) -> None:
    """Wait up to `wait` seconds (what is left of the call's `deadline`) for a usable
    connection; then UNAVAILABLE, the call not sent.

    A call sent on a channel between reconnect attempts would fail at once although it
    never reached the gateway: a gateway just restarted, or back within the deadline
    after an outage, would cost the job an attempt for nothing (issue 22, point 15).
    A gateway that cannot be reached for a whole deadline is down: that attempt is
    charged, and the dispatch breaker pauses the type after --breaker-failures of
    them (then calls are given back uncharged)."""
    if channel.get_state(try_to_connect=True) == grpc.ChannelConnectivity.READY:
        return
    try:
        async with asyncio.timeout(max(wait, 0.0)):
            if on_unreachable is not None and wait > unreachable_after:
                try:
                    async with asyncio.timeout(unreachable_after):
                        await channel.channel_ready()
                        return
                except TimeoutError:
                    state = channel.get_state().name
                    await on_unreachable(
                        f"cannot connect to {address} for {unreachable_after:g}s (channel {state})"
                    )
            await channel.channel_ready()
    except TimeoutError:
        raise GatewayCallError(
            code="UNAVAILABLE",
            reason="",
            message=f"cannot connect to {address} (no connection within {deadline:g}s)",
            deadline_seconds=deadline,
        ) from None


def unreachable_hook(
    gateway: WatchesConnection, job: Job
) -> Callable[[str], Awaitable[None]] | None:
    """`gateway.on_unreachable` for `job`'s call, if set."""
    hook = gateway.on_unreachable
    if hook is None:
        return None
    return functools.partial(hook, job)


class GrpcAiGateway:
    """Implements the `AiGateway` port with the unary RPCs, one call per job."""

    def __init__(
        self,
        address: str,
        channel: grpc.aio.Channel | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        token: str | None = None,
    ) -> None:
        """With `channel`, calls go over it and `close()` leaves it open (its owner
        closes it). A request bigger than `max_call_bytes(max_message_bytes)` fails
        its job without being sent. `token`: the bearer token sent on every call."""
        self.address = address
        self._caller = caller_metadata(token)
        self._max_call_bytes = max_call_bytes(max_message_bytes)
        self._owns_channel = channel is None
        self._channel = channel or open_channel(address)
        self._stub = gw_grpc.AiGatewayServiceStub(self._channel)
        # Set by the worker's executor: told when a call cannot reach the gateway.
        self.on_unreachable: UnreachableHook | None = None
        self.unreachable_after = UNREACHABLE_AFTER

    async def close(self) -> None:
        if self._owns_channel:
            await self._channel.close(None)

    async def run(self, job: Job, deadline: float) -> GatewayAnswer:
        request = gateway_request(job)
        check_call_size(request.ByteSize(), self._max_call_bytes, deadline)
        started = time.monotonic()
        await wait_connected(
            self._channel,
            self.address,
            deadline,
            deadline,
            unreachable_hook(self, job),
            self.unreachable_after,
        )
        timeout = max(deadline - (time.monotonic() - started), 0.001)
        method: Callable[..., Awaitable[Message]] = getattr(self._stub, _KINDS[job.job_type][0])
        metadata = (
            *self._caller,
            ("x-job-id", job.id),
            ("x-attempt", str(job.attempt_count)),
            # The attempt's span (if traced): the gateway's spans join its trace.
            *outgoing_metadata(),
        )
        try:
            # wait_for_ready: should the connection drop between wait_connected and
            # the call, the call (not sent yet) waits for the next one within its
            # deadline instead of failing UNAVAILABLE unsent. grpc never sends a call
            # again once it left (retries are off), so no call is done twice.
            response = await method(
                request, timeout=timeout, metadata=metadata, wait_for_ready=True
            )
        except grpc.aio.AioRpcError as error:
            raise to_gateway_error(error, deadline) from None
        return checked_answer(response, deadline)
