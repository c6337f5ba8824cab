"""The AiGateway port over StreamCalls: every gateway call of this instance travels
on one long-lived stream, many calls per message.

Why: on grpc.aio a unary call costs about 300 µs of CPU across both ends, a stream
message about 90 µs per side whatever it holds. A job service that runs thousands
of jobs a second would spend most of its CPU (and the gateway's) on call overhead.

Batching is natural, never timed: `run()` queues its call and wakes the writer;
the writer sends, in one message, every call (and cancel) queued while its
previous write was in flight. Under light load a message holds one call and
nothing waits; under heavy load the batch grows with the load. The gateway
batches its results the same way.

A session is one open StreamCalls call with its writer and reader tasks and the
calls in flight on it (call_id -> future). Each call keeps everything a unary
call has: its own deadline (sent as `timeout`, and kept here with a local timer
so a hung gateway still times out), cancellation (a cancelled job sends its
call_id in `cancel_call_ids`), and its own error with the gateway's details.
When the stream breaks (the gateway stopped, the connection dropped, or it
ended the stream for any reason), every call in flight fails as UNAVAILABLE, a
transient failure the worker retries, whatever status ended the stream: the
stream is shared, so its end is never one call's fault. The next call opens a
new stream. A gateway without StreamCalls (UNIMPLEMENTED) is spoken to with the
unary RPCs from then on.

A call that never left this service costs its job nothing (issue 22, point 15):
a call waits for the gateway's connection within its deadline before it is
queued, a stream writes nothing before its connection is made, and a call still
queued when its stream ends (the stream could not be opened, or broke before
the call's turn) is sent again on a new stream once connected, within the same
deadline and attempt. Only a call written to a stream may have reached the
gateway; when that stream breaks the call fails as above and stays charged (the
gateway may have done the work).

One call never hurts the others: a call bigger than --max-message-bytes plus
64 KiB fails alone, for good, before it is queued; and every message respects
the gateway's StreamCalls caps (calls per message, call_id length, calls in
flight per stream), so the gateway never has a reason to end the stream.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
from typing import Any

import grpc
from google.protobuf.duration_pb2 import Duration
from google.rpc import status_pb2
from opentelemetry import context as otel_context

from san_jobs.job_service.domain.failures import GatewayCallError
from san_jobs.job_service.domain.limits import DEFAULT_MAX_MESSAGE_BYTES
from san_jobs.job_service.domain.model import GatewayAnswer, Job
from san_jobs.job_service.domain.ports import UnreachableHook
from san_jobs.job_service.gateway_client import (
    UNREACHABLE_AFTER,
    GrpcAiGateway,
    caller_metadata,
    check_call_size,
    checked_answer,
    gateway_request,
    max_call_bytes,
    open_channel,
    retry_details,
    stream_field,
    unreachable_hook,
    wait_connected,
)
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2 as gw
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2_grpc as gw_grpc
from san_jobs.shared.trace_context import current_traceparent

log = logging.getLogger("job_service.gateway_stream")

# A request message carries at most this much of calls (one bigger call goes alone;
# check_call_size keeps that one below the gateway's receive limit).
MAX_MESSAGE_BYTES = 1024 * 1024
# The gateway's StreamCalls caps (ai_gateway.proto): calls (and cancels) per request
# message, and calls in flight per stream. Past the latter the gateway stops reading
# the stream; holding calls here instead keeps them cancellable and unsent.
MAX_CALLS_PER_MESSAGE = 1000
MAX_CALLS_IN_FLIGHT = 1000
# call_id is at most 128 characters; ours are decimal counters, far below.
MAX_CALL_ID_CHARS = 128
# Before a call whose stream ended before it was written is sent again (doubling
# each time, up to RESEND_PAUSE_MAX): the channel said it was connected, so a stream
# that keeps ending at once (a gateway draining for a restart) must not spin.
RESEND_PAUSE = 0.05
RESEND_PAUSE_MAX = 1.0
_CODE_NAMES = {code.value[0]: code.name for code in grpc.StatusCode}
_EOF: object = grpc.aio.EOF  # type: ignore[attr-defined]  # missing from grpc-stubs

_StreamCall = grpc.aio.StreamStreamCall[gw.StreamCallsRequest, gw.StreamCallsResponse]


class _Unimplemented(Exception):
    """The gateway does not serve StreamCalls."""


class _NotSent(Exception):
    """The stream ended before the call was written to it: the gateway never saw
    the call, which may be sent again (`failure`: what the stream's end says)."""

    def __init__(self, failure: GatewayCallError) -> None:
        super().__init__(str(failure))
        self.failure = failure


def status_error(status: status_pb2.Status, deadline: float | None) -> GatewayCallError:
    """A call's failure, from the google.rpc.Status in its result."""
    reason, delay = retry_details(status)
    return GatewayCallError(
        code=_CODE_NAMES.get(status.code, "UNKNOWN"),
        reason=reason,
        message=status.message,
        retry_delay_seconds=delay,
        deadline_seconds=deadline,
    )


def stream_ended(error: grpc.aio.AioRpcError) -> GatewayCallError:
    """What each call in flight hears when the shared stream ends with `error`.

    Always UNAVAILABLE (retried): whatever status ended the stream (the gateway
    going away, a message too big for a limit, a protocol complaint), it is not
    the fault of each call on it, and no call may fail for good because of it.
    The stream's own status stays in the message, for the operator."""
    cause = error.code().name
    details = error.details() or ""
    if cause == "UNAVAILABLE":  # the gateway went away: its words say it best
        return GatewayCallError("UNAVAILABLE", "", details or "the call stream ended")
    status = f"{cause}: {details}" if details else cause
    return GatewayCallError("UNAVAILABLE", "", f"the call stream ended ({status})")


def _duration(seconds: float) -> Duration:
    whole = int(seconds)
    return Duration(seconds=whole, nanos=int((seconds - whole) * 1e9))


class _Session:
    """One open StreamCalls call: a writer, a reader, and the calls in flight."""

    def __init__(
        self,
        stub: gw_grpc.AiGatewayServiceStub,
        metadata: tuple[tuple[str, str], ...] = caller_metadata(None),
    ) -> None:
        # On a grpc.aio channel the stub opens an aio call (the stubs' types say sync).
        open_stream: Any = stub.StreamCalls
        self._call: _StreamCall = open_stream(metadata=metadata)
        self._in_flight: dict[str, asyncio.Future[gw.StreamedCallResult]] = {}
        self._calls: list[gw.StreamedCall] = []
        self._sent: set[str] = set()  # sent and still awaited: counts toward the gateway's cap
        self._cancels: list[str] = []
        self._wake = asyncio.Event()
        self._broken: str | None = None  # why the writer gave up, if it did
        # A write failed: the calls of that write are not sent, and the INTERNAL the
        # reader may then hear is grpc's own, put in place of the gateway's status (a
        # refusal such as UNIMPLEMENTED racing the write): they may go again.
        self._write_failed = False
        self.closed = False
        # The session outlives the job whose call opened it: its tasks must not run
        # in (and log with the trace id of) that job's attempt span.
        untraced = otel_context.attach(otel_context.Context())
        try:
            self._writer = asyncio.create_task(self._write_loop(), name="gateway-stream-writer")
            self._reader = asyncio.create_task(self._read_loop(), name="gateway-stream-reader")
        finally:
            otel_context.detach(untraced)

    def submit(self, call: gw.StreamedCall) -> asyncio.Future[gw.StreamedCallResult]:
        assert len(call.call_id) <= MAX_CALL_ID_CHARS  # a counter: never near the cap
        future: asyncio.Future[gw.StreamedCallResult] = asyncio.get_running_loop().create_future()
        self._in_flight[call.call_id] = future
        self._calls.append(call)
        self._wake.set()
        return future

    def cancel(self, call_id: str) -> None:
        """Stop a call: forget it here, and tell the gateway if it was sent."""
        if self._in_flight.pop(call_id, None) is None or self.closed:
            return
        if call_id in self._sent:
            # No longer awaited here: its place goes to a queued call (the gateway
            # frees it too once the cancel arrives).
            self._sent.discard(call_id)
            self._wake.set()
        for index, queued in enumerate(self._calls):
            if queued.call_id == call_id:  # not sent yet: just don't send it
                del self._calls[index]
                return
        self._cancels.append(call_id)
        self._wake.set()

    async def close(self) -> None:
        stopping = GatewayCallError("UNAVAILABLE", "", "the job service is stopping")
        self._end(stopping, resend=False)
        self._call.cancel()
        for task in (self._writer, self._reader):
            task.cancel()
        await asyncio.gather(self._writer, self._reader, return_exceptions=True)

    def _room(self) -> int:
        """How many more calls the stream may have in flight now."""
        return MAX_CALLS_IN_FLIGHT - len(self._sent)

    def _has_work(self) -> bool:
        return bool(self._cancels) or (bool(self._calls) and self._room() > 0)

    def _take(self) -> gw.StreamCallsRequest:
        """What the next message carries: queued cancels, and queued calls up to
        MAX_MESSAGE_BYTES (at least one), each at most MAX_CALLS_PER_MESSAGE, and no
        more calls than the stream has room for."""
        request = gw.StreamCallsRequest(cancel_call_ids=self._cancels[:MAX_CALLS_PER_MESSAGE])
        del self._cancels[:MAX_CALLS_PER_MESSAGE]
        most = min(MAX_CALLS_PER_MESSAGE, self._room())
        size = 0
        taken = 0
        for call in self._calls:
            size += call.ByteSize()
            if taken == most or (taken and size > MAX_MESSAGE_BYTES):
                break
            taken += 1
        request.calls.extend(self._calls[:taken])
        self._sent.update(call.call_id for call in self._calls[:taken])
        del self._calls[:taken]
        return request

    async def _write_loop(self) -> None:
        try:
            # Nothing is written before the stream is on a connection: a stream that
            # cannot be opened (the channel lost its connection, or is between two
            # attempts) ends with every call still queued, so none of them is charged.
            await self._call.wait_for_connection()
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._has_work():
                    request = self._take()
                    try:
                        await self._call.write(request)
                    except Exception:
                        # Not written: the gateway never had these calls.
                        self._sent.difference_update(c.call_id for c in request.calls)
                        self._write_failed = True
                        raise
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the stream is done for; the reader tells why
            if self._call.done():
                # The gateway ended the stream first (e.g. UNAUTHENTICATED): the write
                # failed because of it, and the reader reports the stream's own status.
                return
            self._broken = f"{type(error).__name__}: {error}"
            self._call.cancel()

    async def _read_loop(self) -> None:
        failure: Exception
        # Whether calls not written yet may be sent again on a new stream: not when
        # the gateway itself ended this one (EOF, or a status such as UNAUTHENTICATED
        # that a new stream would meet too; they fail with it, as before).
        resend = True
        try:
            while True:
                message: object = await self._call.read()
                if message is _EOF:
                    failure = GatewayCallError(
                        "UNAVAILABLE", "", "the AI gateway ended the call stream"
                    )
                    resend = False
                    break
                assert isinstance(message, gw.StreamCallsResponse)
                for result in message.results:
                    self._sent.discard(result.call_id)
                    future = self._in_flight.pop(result.call_id, None)
                    if future is not None and not future.done():
                        future.set_result(result)
                if self._calls:
                    self._wake.set()  # calls held back for room may go now
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.UNIMPLEMENTED:
                failure = _Unimplemented(error.details())
            elif self._broken is not None and error.code() == grpc.StatusCode.CANCELLED:
                # Our own cancel after a failed write: the write's error says why.
                failure = GatewayCallError(
                    "UNAVAILABLE", "", f"the call stream broke while sending ({self._broken})"
                )
            else:
                failure = stream_ended(error)
                # INTERNAL after a failed write is grpc's, not the gateway's.
                resend = error.code() == grpc.StatusCode.UNAVAILABLE or (
                    self._write_failed and error.code() == grpc.StatusCode.INTERNAL
                )
        self._end(failure, resend)

    def _end(self, failure: Exception, resend: bool = True) -> None:
        """No more calls on this session; every call in flight hears `failure`, and
        (with `resend`) one never written, still queued, hears that it was not sent."""
        self.closed = True
        self._writer.cancel()
        in_flight, self._in_flight = self._in_flight, {}
        for call_id, future in in_flight.items():
            if future.done():
                continue
            unsent = resend and call_id not in self._sent
            if unsent and isinstance(failure, GatewayCallError):
                future.set_exception(_NotSent(failure))
            else:
                future.set_exception(failure)
        self._calls.clear()


class StreamingAiGateway:
    """Implements the `AiGateway` port over StreamCalls (unary RPCs with an older
    gateway that lacks it)."""

    def __init__(
        self,
        address: str,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        credentials: grpc.ChannelCredentials | None = None,
        token: str | None = None,
    ) -> None:
        """`max_message_bytes` is JobService's --max-message-bytes: a call bigger than
        it plus CALL_OVERHEAD_BYTES fails its job without being sent. `credentials`:
        TLS to the gateway (see open_channel). `token`: the bearer token sent on
        every call, unary and StreamCalls (--gateway-token-file)."""
        self.address = address
        self._max_call_bytes = max_call_bytes(max_message_bytes)
        self._channel = open_channel(address, credentials)
        self._stub = gw_grpc.AiGatewayServiceStub(self._channel)
        self._unary = GrpcAiGateway(address, self._channel, max_message_bytes, token)
        # Set by the worker's executor: told when a call cannot reach the gateway.
        self.on_unreachable: UnreachableHook | None = None
        self.unreachable_after = UNREACHABLE_AFTER
        self._metadata = caller_metadata(token)
        self._unary_only = False
        self._session: _Session | None = None
        self._ids = itertools.count(1)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        await self._channel.close(None)

    def _open_session(self) -> _Session:
        session = self._session
        if session is None or session.closed:
            session = self._session = _Session(self._stub, self._metadata)
        return session

    async def _send(
        self, call: gw.StreamedCall, remaining: float, deadline: float
    ) -> gw.StreamedCallResult:
        """One try of `call` on the open stream (a new one if none is): its result,
        or GatewayCallError, or _NotSent / _Unimplemented for run() to handle."""
        session = self._open_session()
        future = session.submit(call)
        try:
            # The gateway keeps the deadline too; this timer is for a gateway that hangs.
            async with asyncio.timeout(remaining):
                return await future
        except TimeoutError:
            session.cancel(call.call_id)
            raise GatewayCallError(
                "DEADLINE_EXCEEDED", "", "Deadline Exceeded", deadline_seconds=deadline
            ) from None
        except asyncio.CancelledError:
            session.cancel(call.call_id)  # the job was cancelled, or the service stops
            raise
        except GatewayCallError as error:  # the stream broke after the call was written
            raise dataclasses.replace(error, deadline_seconds=deadline) from None

    async def run(self, job: Job, deadline: float) -> GatewayAnswer:
        if self._unary_only:
            return await self._unary.run(job, deadline)
        loop = asyncio.get_running_loop()
        started = loop.time()
        field = stream_field(job.job_type)
        call = gw.StreamedCall(
            call_id=str(next(self._ids)),
            timeout=_duration(deadline),
            job_id=job.id,
            attempt=job.attempt_count,
        )
        traceparent = current_traceparent()
        if traceparent is not None:
            # Each call its own trace context (the stream is shared by every job): the
            # attempt's span. Set only when traced: even an empty field costs a µs.
            call.traceparent = traceparent
        getattr(call, field).CopyFrom(gateway_request(job))
        # Checked before waiting for a connection: a call too big to send fails
        # for good, even while the gateway is away.
        check_call_size(call.ByteSize(), self._max_call_bytes, deadline)
        pause = RESEND_PAUSE
        while True:
            left = deadline - (loop.time() - started)
            await wait_connected(
                self._channel,
                self.address,
                left,
                deadline,
                unreachable_hook(self, job),
                self.unreachable_after,
            )
            remaining = max(deadline - (loop.time() - started), 0.001)
            call.timeout.CopyFrom(_duration(remaining))
            try:
                result = await self._send(call, remaining, deadline)
                break
            except _NotSent as not_sent:
                # The gateway never saw it: the same attempt sends it again once the
                # channel is connected, while the deadline lasts.
                failure = dataclasses.replace(not_sent.failure, deadline_seconds=deadline)
                if deadline - (loop.time() - started) <= pause:
                    raise failure from None
                log.info(
                    "job_id=%s: gateway call not sent, its stream ended first (%s); "
                    "sending it once connected",
                    job.id,
                    failure.message,
                )
                await asyncio.sleep(pause)
                pause = min(pause * 2, RESEND_PAUSE_MAX)
            except _Unimplemented:
                if not self._unary_only:
                    self._unary_only = True
                    log.warning(
                        "AI gateway at %s has no StreamCalls: using its unary RPCs", self.address
                    )
                self._unary.on_unreachable = self.on_unreachable
                self._unary.unreachable_after = self.unreachable_after
                return await self._unary.run(job, max(deadline - (loop.time() - started), 0.001))
        outcome = result.WhichOneof("outcome")
        if outcome == "error":
            raise status_error(result.error, deadline)
        if outcome != field:
            answered = outcome or "nothing"
            raise GatewayCallError(
                "INTERNAL", "", f"the AI gateway answered a {field} call with {answered}"
            )
        return checked_answer(getattr(result, field), deadline)
