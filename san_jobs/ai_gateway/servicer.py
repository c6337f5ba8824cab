"""gRPC transport: the AiGatewayService RPCs, the caller's identity, rich errors.

Every call, unary or on a StreamCalls stream, runs through one
:class:`~san_jobs.ai_gateway.calls.CallRunner`; this module only adapts gRPC to it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import grpc
from google.protobuf.message import Message
from opentelemetry.trace import Tracer

from san_jobs.ai_gateway.bounds import StreamLimits
from san_jobs.ai_gateway.callers import Authenticator
from san_jobs.ai_gateway.calllog import CallLog
from san_jobs.ai_gateway.calls import CallRunner
from san_jobs.ai_gateway.decoding import UndecodableRequest, refusal
from san_jobs.ai_gateway.errors import GatewayError
from san_jobs.ai_gateway.gateway import CallInfo, Gateway
from san_jobs.ai_gateway.kind import Kind
from san_jobs.ai_gateway.kinds import KINDS
from san_jobs.ai_gateway.metrics import CallMetrics
from san_jobs.ai_gateway.stream import CallStream
from san_jobs.ai_gateway.transport_errors import to_rpc_status
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2 as pb

Context = grpc.aio.ServicerContext[object, object]

_MAX_CLIENT_ID = 128
# grpc.aio reports a huge remaining time when the caller set no deadline.
_NO_DEADLINE = 10**6


class AiGatewayServicer:
    """The AiGatewayService RPCs over a :class:`~san_jobs.ai_gateway.gateway.Gateway`.

    Its unary RPCs are made from the kinds of call (san_jobs/ai_gateway/kinds/), one
    method each, named as the contract names the RPC (below the class). It is
    registered by san_jobs.ai_gateway.decoding.add_servicer, which finds every RPC of
    the contract here by name, so it does not extend the generated base class (whose
    abstract methods, one per RPC, would have to be written out)."""

    def __init__(
        self,
        gateway: Gateway,
        call_log: CallLog,
        limits: StreamLimits | None = None,
        authenticator: Authenticator | None = None,
        tracer: Tracer | None = None,
        metrics: CallMetrics | None = None,
    ) -> None:
        """``authenticator`` decides who may call (None: anyone, known by address).
        ``tracer`` (None: tracing off): a span around each call's backend work.
        ``metrics`` (None: off): every call counted (san_jobs.ai_gateway.metrics)."""
        self._limits = limits or StreamLimits()
        self._authenticator = authenticator or Authenticator()
        self._runner = CallRunner(gateway, call_log, self._limits.max_answer_bytes, tracer, metrics)
        self._streams: set[CallStream] = set()
        # The tasks running RPCs, unary or streams: see close().
        self._handlers: set[asyncio.Task[Any]] = set()

    # grpc.aio takes a coroutine that uses context.read()/write() (the generated base
    # declares a generator), which lets reading and writing run side by side.
    async def StreamCalls(
        self,
        request_iterator: AsyncIterator[pb.StreamCallsRequest] | Iterator[pb.StreamCallsRequest],
        context: grpc.aio.ServicerContext[pb.StreamCallsRequest, pb.StreamCallsResponse],
    ) -> None:
        """Many calls over one stream; see :mod:`san_jobs.ai_gateway.stream`."""
        try:
            caller = self._authenticator.identify(context)  # type: ignore[arg-type]
        except GatewayError as err:
            await context.abort_with_status(to_rpc_status(err))  # type: ignore[attr-defined]
            raise  # unreachable: abort_with_status raises
        label = _client_label(_metadata(context.invocation_metadata()))
        stream = CallStream(self._runner, caller, context, self._limits, client_label=label)
        handler = _current_task()
        self._streams.add(stream)
        self._handlers.add(handler)
        try:
            await stream.serve()
        finally:
            self._streams.discard(stream)
            self._handlers.discard(handler)

    def drain(self) -> None:
        """The server is stopping: every open stream refuses new calls and ends when done."""
        for stream in self._streams:
            stream.drain()

    async def close(self) -> None:
        """After the server has stopped: finish the RPCs its grace cut short.

        grpc.aio cancels them, but its ``stop`` may return before their tasks have
        unwound; they are cancelled (again) and awaited here, so that every call has
        stopped and written its record before the backend and the call log close.
        """
        pending = [task for task in self._handlers if not task.done()]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)

    async def _unary(
        self, kind: Kind[Any, Any], request: Message | UndecodableRequest, context: Context
    ) -> Message:
        """Run one call; a gateway error ends the RPC with its rich status (an
        undecodable request: INVALID_ARGUMENT, once the caller is known)."""
        handler = _current_task()
        self._handlers.add(handler)
        try:
            # Refused before anything is counted: an unknown caller spends no one's budget.
            call = call_info(kind.method, context, self._authenticator.identify(context))
            if isinstance(request, UndecodableRequest):
                raise refusal(request, kind.method, call.caller)
            remaining: float | None = context.time_remaining()
            if remaining is not None and remaining > _NO_DEADLINE:
                remaining = None
            return await self._runner.run(kind, request, call, remaining)
        except GatewayError as err:
            # abort_with_status is missing from grpc-stubs' aio context.
            await context.abort_with_status(to_rpc_status(err))  # type: ignore[attr-defined]
            raise  # unreachable: abort_with_status raises
        finally:
            self._handlers.discard(handler)


def _unary_rpc(kind: Kind[Any, Any]) -> Callable[..., Awaitable[Message]]:
    """The servicer method of ``kind``'s unary RPC (named as the contract names it)."""

    async def rpc(self: AiGatewayServicer, request: Message, context: Context) -> Message:
        return await self._unary(kind, request, context)

    rpc.__name__ = rpc.__qualname__ = kind.method
    rpc.__doc__ = kind.summary
    return rpc


# One unary RPC per kind (grpc finds them by name: decoding.add_servicer).
for _kind in KINDS:
    setattr(AiGatewayServicer, _kind.method, _unary_rpc(_kind))


def _current_task() -> asyncio.Task[Any]:
    task = asyncio.current_task()
    assert task is not None, "grpc.aio runs every RPC in a task"
    return task


def call_info(method: str, context: Context, caller: str) -> CallInfo:
    """The call's record: who (``caller``, as authenticated), the ``x-client-id``
    label (untrusted: logged only), the job id and attempt."""
    metadata = _metadata(context.invocation_metadata())
    attempt_text = metadata.get("x-attempt", "")
    attempt = int(attempt_text) if attempt_text.isdigit() else None
    return CallInfo(
        method,
        caller,
        metadata.get("x-job-id") or None,
        attempt,
        client_label=_client_label(metadata),
    )


def _metadata(pairs: grpc.aio.Metadata | None) -> dict[str, str]:
    metadata: dict[str, str] = {}
    for key, value in pairs or ():
        if isinstance(value, str):
            metadata[key.lower()] = value
    return metadata


def _client_label(metadata: dict[str, str]) -> str | None:
    """What the caller says it is (``x-client-id``): a label for the call record only,
    never the key of a limit (anyone can write anything there)."""
    return metadata.get("x-client-id", "").strip()[:_MAX_CLIENT_ID] or None
