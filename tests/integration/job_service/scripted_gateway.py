"""A scripted AiGatewayService on a real loopback port, for JobService tests that
need an exact failure (a status with rich details, a hang, a slow answer, a call
held until the test releases it) on a chosen call. The real gateway's own behaviour
is tested in its own suite and in the acceptance tests.

It serves the unary RPCs and StreamCalls (which JobService uses), each call
scripted the same way; `unary_only=True` leaves StreamCalls out, as an older
gateway would."""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from san_jobs.proto.aigateway.v1 import ai_gateway_pb2 as gw
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2_grpc as gw_grpc


@dataclass
class Fail:
    """Answer with this status (and ErrorInfo reason / RetryInfo delay: seconds, or
    a Duration as is, for values no float can say)."""

    code: grpc.StatusCode
    message: str
    reason: str = ""
    retry_delay: float | duration_pb2.Duration | None = None


@dataclass
class Hang:
    """Never answer (until cancelled)."""


@dataclass
class Slow:
    seconds: float


@dataclass
class Held:
    """Answer normally once the test calls `release()`; `reached` is set when the
    call arrives. A test waits on it to act while the job is certainly PROCESSING,
    with no sleep and no race."""

    reached: asyncio.Event = field(default_factory=asyncio.Event)
    released: asyncio.Event = field(default_factory=asyncio.Event)
    # Set before the release: the call then fails so instead of answering.
    fail: Fail | None = None

    def release(self) -> None:
        self.released.set()


Action = Fail | Hang | Slow | Held | None


@dataclass
class ScriptedGateway(gw_grpc.AiGatewayServiceServicer):
    """`script(job_id, attempt)` decides each call; None means answer normally."""

    script: Callable[[str, int], Action] = lambda _job, _attempt: None
    calls: Counter[str] = field(default_factory=Counter)
    cancelled: list[str] = field(default_factory=list)
    unary_only: bool = False
    # Calls that came over StreamCalls, and how many StreamCalls streams were opened.
    stream_calls: int = 0
    streams_opened: int = 0
    largest_request: int = 0  # most calls one StreamCallsRequest carried
    # Calls being answered now, and the most there ever were at once.
    in_flight: int = 0
    peak_in_flight: int = 0

    async def _script(self, job_id: str, attempt: int) -> status_pb2.Status | None:
        """Run the script for one call: None to answer normally, else the status to fail with."""
        self.calls[job_id] += 1
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        action = self.script(job_id, attempt)
        try:
            if isinstance(action, Hang):
                await asyncio.sleep(3600)
            elif isinstance(action, Held):
                action.reached.set()
                await action.released.wait()
            elif isinstance(action, Slow):
                await asyncio.sleep(action.seconds)
        except asyncio.CancelledError:
            self.cancelled.append(job_id)
            raise
        finally:
            self.in_flight -= 1
        if isinstance(action, Held) and action.fail is not None:
            action = action.fail
        if not isinstance(action, Fail):
            return None
        status = status_pb2.Status(code=action.code.value[0], message=action.message)
        if action.reason:
            info = any_pb2.Any()
            info.Pack(error_details_pb2.ErrorInfo(reason=action.reason, domain="aigateway.san"))
            status.details.append(info)
        if action.retry_delay is not None:
            retry = any_pb2.Any()
            delay = duration_pb2.Duration()
            if isinstance(action.retry_delay, duration_pb2.Duration):
                delay.CopyFrom(action.retry_delay)
            else:
                delay.FromNanoseconds(int(action.retry_delay * 1e9))
            retry.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
            status.details.append(retry)
        return status

    async def _act(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        metadata = dict(context.invocation_metadata() or ())
        job_id = str(metadata.get("x-job-id", ""))
        attempt = int(str(metadata.get("x-attempt", "0")))
        status = await self._script(job_id, attempt)
        if status is not None:
            await context.abort_with_status(rpc_status.to_status(status))

    async def AnalyzeContent(
        self, request: gw.AnalyzeContentRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> gw.AnalyzeContentResponse:
        await self._act(context)
        return _analyze(request)

    async def GenerateTil(
        self, request: gw.GenerateTilRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> gw.GenerateTilResponse:
        await self._act(context)
        return _til(request)

    async def GenerateRecall(
        self, request: gw.GenerateRecallRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> gw.GenerateRecallResponse:
        await self._act(context)
        return _recall(request)

    async def _stream_call(self, call: gw.StreamedCall) -> gw.StreamedCallResult:
        self.stream_calls += 1
        status = await self._script(call.job_id, call.attempt)
        if status is not None:
            return gw.StreamedCallResult(call_id=call.call_id, error=status)
        kind = call.WhichOneof("request")
        answers: dict[str, Callable[[Any], Any]] = {
            "analyze_content": _analyze,
            "generate_til": _til,
            "generate_recall": _recall,
        }
        answer = answers[str(kind)](getattr(call, str(kind)))
        return gw.StreamedCallResult(call_id=call.call_id, **{str(kind): answer})

    async def StreamCalls(
        self,
        request_iterator: AsyncIterator[gw.StreamCallsRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[gw.StreamCallsResponse]:
        if self.unary_only:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
        self.streams_opened += 1
        done: asyncio.Queue[gw.StreamedCallResult] = asyncio.Queue()
        tasks: dict[str, asyncio.Task[gw.StreamedCallResult]] = {}

        def finished(call_id: str, task: asyncio.Task[gw.StreamedCallResult]) -> None:
            tasks.pop(call_id, None)
            if task.cancelled():
                status = status_pb2.Status(code=grpc.StatusCode.CANCELLED.value[0])
                done.put_nowait(gw.StreamedCallResult(call_id=call_id, error=status))
            else:
                done.put_nowait(task.result())

        async def read() -> None:
            async for request in request_iterator:
                self.largest_request = max(self.largest_request, len(request.calls))
                for call_id in request.cancel_call_ids:
                    if call_id in tasks:
                        tasks[call_id].cancel()
                for call in request.calls:
                    task = asyncio.create_task(self._stream_call(call))
                    tasks[call.call_id] = task
                    task.add_done_callback(functools.partial(finished, call.call_id))

        reader = asyncio.create_task(read())
        try:
            while not (reader.done() and not tasks and done.empty()):
                getter = asyncio.ensure_future(done.get())
                await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                    continue
                results = [getter.result()]
                while not done.empty():
                    results.append(done.get_nowait())
                yield gw.StreamCallsResponse(results=results)
        finally:
            reader.cancel()
            for task in list(tasks.values()):
                task.cancel()


def _analyze(request: gw.AnalyzeContentRequest) -> gw.AnalyzeContentResponse:
    first = request.text.split(".")[0].strip()
    return gw.AnalyzeContentResponse(
        summary=f"{first}.", tags=["scripted"], embedding=[0.6, 0.8], model="scripted"
    )


def _til(request: gw.GenerateTilRequest) -> gw.GenerateTilResponse:
    body = "\n".join(f"- {n}" for n in request.notes)
    return gw.GenerateTilResponse(title=f"TIL {request.day}", body=body, model="scripted")


def _recall(request: gw.GenerateRecallRequest) -> gw.GenerateRecallResponse:
    return gw.GenerateRecallResponse(
        questions=[
            gw.Question(question=f"What is {s.title}?", answer=s.text, source_index=i)
            for i, s in enumerate(request.sources)
        ],
        model="scripted",
    )


async def start_scripted_gateway(
    gateway: ScriptedGateway,
    address: str = "127.0.0.1:0",
    options: list[tuple[str, Any]] | None = None,
) -> tuple[grpc.aio.Server, str]:
    """Serve `gateway` at `address`; `options` are grpc server options (e.g. the
    real gateway's message size limits)."""
    server = grpc.aio.server(options=options)
    gw_grpc.add_AiGatewayServiceServicer_to_server(gateway, server)
    port = server.add_insecure_port(address)
    await server.start()
    return server, f"127.0.0.1:{port}"
