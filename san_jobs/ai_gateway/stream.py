"""One StreamCalls stream: many calls in flight on one gRPC call, results batched.

Two loops share the stream:

* the reader takes each request message, cancels the calls named in
  ``cancel_call_ids`` and starts one task per call (each through the same
  :class:`~san_jobs.ai_gateway.calls.CallRunner` as a unary RPC, so it is checked, limited,
  bounded by its deadline and recorded exactly as one);
* the writer (the RPC's own task) sends finished results. Batching is adaptive and
  never timed: whatever finished while the previous message was being written goes
  out in the next one (up to about 1 MiB). At light load a message holds one result
  and nothing waits; under load batches grow with it, and gRPC's cost per message is
  paid once per batch instead of once per call.

Backpressure: the calls in flight plus the results not yet sent are at most
``--max-stream-calls``. A call that finds the stream full waits for room (the writer
sending results), and the reader reads nothing more meanwhile: gRPC's flow control then
stops the caller. A caller that sends and never reads holds that much and no more.

How the stream ends: the caller half-closes (calls in flight finish and are sent, then
OK); the caller cancels or the connection breaks (grpc.aio cancels the RPC's task and
every call in flight is cancelled with it); a request breaks the protocol (calls in
flight are cancelled, INVALID_ARGUMENT); the gateway shuts down (:meth:`drain`: new
calls are refused, the calls in flight finish within the server's grace and are sent,
then UNAVAILABLE, so a shutdown does not wait out its grace for a stream that stays
open).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Sequence
from typing import Any

import grpc

from san_jobs.ai_gateway.bounds import (
    ENTRY_FRAMING_BYTES,
    ENVELOPE_BYTES,
    MAX_CALL_ID_CHARS,
    MAX_CALLS_PER_MESSAGE,
    StreamLimits,
)
from san_jobs.ai_gateway.calls import CallRunner
from san_jobs.ai_gateway.decoding import UndecodableRequest, refusal
from san_jobs.ai_gateway.errors import (
    BackendUnavailable,
    FieldViolation,
    GatewayError,
    InvalidRequest,
    MalformedResponse,
)
from san_jobs.ai_gateway.gateway import CallInfo
from san_jobs.ai_gateway.kind import Kind
from san_jobs.ai_gateway.kinds import KINDS_BY_FIELD
from san_jobs.ai_gateway.transport_errors import (
    cancelled_status,
    status_code_name,
    to_rpc_status,
    to_status_proto,
)
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2 as pb

logger = logging.getLogger("ai_gateway.stream")

Context = grpc.aio.ServicerContext[pb.StreamCallsRequest, pb.StreamCallsResponse]

# The method name in the record of a call that named no request (it has no RPC kind).
STREAM_METHOD = "StreamCalls"
SHUTTING_DOWN = "the AI gateway is shutting down"

_KIND_NAMES = ", ".join(KINDS_BY_FIELD)
_EOF: object = grpc.aio.EOF  # type: ignore[attr-defined]  # missing from grpc-stubs
_Flight = tuple[asyncio.Task[None], CallInfo]  # a call's task and who/what it is for


class CallStream:
    """The calls of one StreamCalls RPC. :meth:`serve` runs it; call it once."""

    def __init__(
        self,
        runner: CallRunner,
        caller: str,
        context: Context,
        limits: StreamLimits | None = None,
        client_label: str | None = None,
    ) -> None:
        """``caller``: the stream's authenticated identity (keys every call's limits);
        ``client_label``: its ``x-client-id``, for the call records only."""
        self._runner = runner
        self._caller = caller
        self._client_label = client_label
        self._context = context
        self._limits = limits or StreamLimits()
        self._loop = asyncio.get_running_loop()
        self._in_flight: dict[str, _Flight] = {}
        # Finished results not yet sent, each with its size (computed once).
        self._done: list[tuple[pb.StreamedCallResult, int]] = []
        self._sending = 0  # results in the message being written
        self._wake = asyncio.Event()  # for the writer: a result is done, or the reader ended
        self._room = asyncio.Event()  # for the reader: results were sent
        self._draining = False
        # True while the reader waits for room (reads nothing): for tests and operators.
        self.paused = False

    @property
    def writing(self) -> bool:
        """Whether a response message is being written (it waits for flow control)."""
        return self._sending > 0

    @property
    def pending(self) -> int:
        """Calls in flight plus results not yet sent: what the stream holds."""
        return len(self._in_flight) + len(self._done) + self._sending

    async def serve(self) -> None:
        """Run the stream until it ends (see the module docstring for how)."""
        reader = self._loop.create_task(self._read(), name="stream-calls-reader")
        reader.add_done_callback(lambda _: self._wake.set())
        try:
            await self._write(reader)
        except GatewayError as err:
            await self._context.abort_with_status(to_rpc_status(err))  # type: ignore[attr-defined]
        finally:
            reader.cancel()
            if reader.done() and not reader.cancelled():
                reader.exception()  # seen (or raised above): not "never retrieved"
            tasks = [task for task, _ in self._in_flight.values()]
            for call_id in list(self._in_flight):
                self._cancel(call_id)
            # Let the cancelled calls unwind (and write their records) before the RPC
            # is over: a server that stops next closes the call log.
            if tasks:
                await asyncio.wait(tasks)

    def drain(self) -> None:
        """The gateway is stopping: refuse new calls, end once the calls in flight are sent."""
        self._draining = True
        self._wake.set()

    async def _write(self, reader: asyncio.Task[None]) -> None:
        while True:
            reading = not reader.done()
            if not reading and (error := reader.exception()) is not None:
                raise error  # a protocol violation: end now, the calls in flight with it
            if self._done:
                batch = self._take()
                self._sending = len(batch)
                try:
                    await self._context.write(pb.StreamCallsResponse(results=batch))
                finally:
                    self._sending = 0
                self._room.set()
                continue
            if not reading:
                if not self._in_flight:
                    return  # half-closed and every call answered: OK
            elif self._draining and not self._in_flight:
                raise BackendUnavailable(SHUTTING_DOWN)
            self._wake.clear()
            await self._wake.wait()

    def _take(self) -> list[pb.StreamedCallResult]:
        """The finished results for the next message: all of them, up to about 1 MiB
        (StreamLimits.batch_bytes); a bigger result goes alone."""
        done = self._done
        size = 0
        for i, (_, result_size) in enumerate(done):
            size += result_size + ENTRY_FRAMING_BYTES
            if size > self._limits.batch_bytes and i > 0:
                self._done = done[i:]
                return [result for result, _ in done[:i]]
        self._done = []
        return [result for result, _ in done]

    async def _read(self) -> None:
        while True:
            request = await self._context.read()
            if request is _EOF:
                return
            if isinstance(request, UndecodableRequest):
                raise refusal(request, STREAM_METHOD, self._caller)  # ends the stream
            if request.calls:
                self._check_calls(request.calls)
            # Cancels first: a call started and cancelled in the same message never
            # runs, and a cancel is not held up behind calls waiting for room.
            cancels = set(request.cancel_call_ids)
            for call_id in request.cancel_call_ids:
                self._cancel(call_id)
            now = self._loop.time()
            for call in request.calls:
                await self._wait_for_room()
                if call.call_id in cancels:
                    self._refuse(call.call_id, self._info(call), None)
                else:
                    self._start(call, now)

    async def _wait_for_room(self) -> None:
        """Return once the stream holds fewer than --max-stream-calls calls and results."""
        while self.pending >= self._limits.max_stream_calls:
            self.paused = True
            self._room.clear()
            await self._room.wait()
        self.paused = False

    def _check_calls(self, calls: Sequence[pb.StreamedCall]) -> None:
        """Raise InvalidRequest (ends the stream) for too many calls in one message, or
        an empty, too long or repeated call_id."""
        if len(calls) > MAX_CALLS_PER_MESSAGE:
            problem = f"at most {MAX_CALLS_PER_MESSAGE} calls per message, got {len(calls)}"
            logger.warning("StreamCalls from %s: calls: %s", self._caller, problem)
            raise InvalidRequest([FieldViolation("calls", problem)])
        ids = [call.call_id for call in calls]
        if (
            "" not in ids
            and max(map(len, ids)) <= MAX_CALL_ID_CHARS
            and len(set(ids)) == len(ids)
            and self._in_flight.keys().isdisjoint(ids)
        ):
            return
        seen: set[str] = set()
        for i, call_id in enumerate(ids):
            if not call_id:
                problem = "required"
            elif len(call_id) > MAX_CALL_ID_CHARS:
                problem = f"at most {MAX_CALL_ID_CHARS} characters, got {len(call_id)}"
            elif call_id in self._in_flight:
                problem = f"{call_id!r} is already in flight on this stream"
            elif call_id in seen:
                problem = f"{call_id!r} appears twice in this message"
            else:
                seen.add(call_id)
                continue
            logger.warning("StreamCalls from %s: calls[%d].call_id %s", self._caller, i, problem)
            raise InvalidRequest([FieldViolation(f"calls[{i}].call_id", problem)])

    def _info(self, call: pb.StreamedCall) -> CallInfo:
        """Who the call is for, as its record names it."""
        which = call.WhichOneof("request")
        method = STREAM_METHOD if which is None else KINDS_BY_FIELD[which].method
        attempt = call.attempt if call.attempt > 0 else None  # 0: unknown, as x-attempt
        return CallInfo(
            method,
            self._caller,
            call.job_id or None,
            attempt,
            client_label=self._client_label,
            traceparent=call.traceparent,
        )

    def _start(self, call: pb.StreamedCall, now: float) -> None:
        which = call.WhichOneof("request")
        info = self._info(call)
        if which is None:
            missing = FieldViolation("request", f"one of {_KIND_NAMES} is required")
            self._refuse(call.call_id, info, InvalidRequest([missing]))
            return
        kind = KINDS_BY_FIELD[which]
        if self._draining:
            self._refuse(call.call_id, info, BackendUnavailable(SHUTTING_DOWN))
            return
        # The deadline counts from now, when the gateway read the call (as a unary
        # call's deadline counts for the server), not from when its task first runs.
        deadline = None
        if call.HasField("timeout"):
            deadline = now + call.timeout.seconds + call.timeout.nanos * 1e-9
        task = self._loop.create_task(
            self._run(call.call_id, which, kind, getattr(call, which), info, deadline)
        )
        self._in_flight[call.call_id] = (task, info)

    async def _run(
        self,
        call_id: str,
        field: str,
        kind: Kind[Any, Any],
        request: Any,
        info: CallInfo,
        deadline: float | None,
    ) -> None:
        remaining = None if deadline is None else deadline - self._loop.time()
        try:
            response = await self._runner.run(kind, request, info, remaining)
        except GatewayError as err:
            result = pb.StreamedCallResult(call_id=call_id, error=to_status_proto(err))
        except asyncio.CancelledError:
            # Cancelled by the caller (cancel_call_ids) or with the stream: this task is
            # ours and ends here; the runner already recorded CANCELLED.
            result = pb.StreamedCallResult(call_id=call_id, error=cancelled_status())
        else:
            result = pb.StreamedCallResult(call_id=call_id)
            getattr(result, field).CopyFrom(response)
        self._finish(call_id, result)

    def _cancel(self, call_id: str) -> None:
        flight = self._in_flight.get(call_id)
        if flight is None:
            return  # finished already, or never started: ignored, as the contract says
        task, info = flight
        task.cancel()
        coro = task.get_coro()
        if inspect.iscoroutine(coro) and inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
            # Cancelled before its first step: its body (and the runner) never runs, so
            # the record and the result are written here.
            self._runner.record(info, "CANCELLED", time.perf_counter())
            self._finish(call_id, pb.StreamedCallResult(call_id=call_id, error=cancelled_status()))

    def _refuse(self, call_id: str, info: CallInfo, err: GatewayError | None) -> None:
        """Answer a call with ``err`` (None: cancelled) without running it (it is still
        recorded)."""
        code = "CANCELLED" if err is None else status_code_name(err)
        self._runner.record(info, code, time.perf_counter())
        status = cancelled_status() if err is None else to_status_proto(err)
        self._add(pb.StreamedCallResult(call_id=call_id, error=status))

    def _finish(self, call_id: str, result: pb.StreamedCallResult) -> None:
        del self._in_flight[call_id]
        self._add(result)

    def _add(self, result: pb.StreamedCallResult) -> None:
        """Queue ``result`` for the writer; one too big to send becomes its call's error.

        Answers are checked by the runner; this catches anything else (a huge error),
        so that the writer never sends a message above the server's send limit.
        """
        size = result.ByteSize()
        if size > self._limits.max_answer_bytes + ENVELOPE_BYTES // 2:
            err = MalformedResponse(f"the result is too large to send: {size} bytes")
            logger.error("StreamCalls from %s: %s", self._caller, err.message)
            result = pb.StreamedCallResult(call_id=result.call_id, error=to_status_proto(err))
            size = result.ByteSize()
        self._done.append((result, size))
        self._wake.set()
