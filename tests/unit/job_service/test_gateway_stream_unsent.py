"""A gateway call that never left JobService costs nothing (issue 22, point 15), on
stand-ins for the grpc call: a stream that cannot be opened writes nothing and ends
with its calls "not sent"; run() then sends the call again on a new stream within
the same deadline; a call written to a stream that breaks fails as before (the
gateway may have done the work)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import grpc
import pytest

from san_jobs.job_service.domain.failures import GatewayCallError
from san_jobs.job_service.domain.model import Job, JobStatus, JobType
from san_jobs.job_service.gateway_stream import StreamingAiGateway, _NotSent, _Session
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2 as gw


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    """What a grpc.aio call raises when it ends with `code`."""
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


UNAVAILABLE = rpc_error(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses")


class UnconnectedCall:
    """A StreamCalls call grpc could not start on a connection."""

    def __init__(self) -> None:
        self.written: list[gw.StreamCallsRequest] = []

    async def wait_for_connection(self) -> None:
        raise UNAVAILABLE

    async def write(self, request: gw.StreamCallsRequest) -> None:
        self.written.append(request)

    async def read(self) -> object:
        await asyncio.sleep(0)
        raise UNAVAILABLE

    def done(self) -> bool:
        return True

    def cancel(self) -> bool:
        return True


class ConnectedCall:
    """A StreamCalls call on a connection: answers each call it is written, or, with
    `break_after_write`, breaks once something was written."""

    def __init__(self, break_after_write: bool = False) -> None:
        self.written: list[gw.StreamCallsRequest] = []
        self._break = break_after_write
        self._answers: asyncio.Queue[gw.StreamCallsResponse | Exception] = asyncio.Queue()

    async def wait_for_connection(self) -> None:
        return None

    async def write(self, request: gw.StreamCallsRequest) -> None:
        self.written.append(request)
        if self._break:
            self._answers.put_nowait(rpc_error(grpc.StatusCode.UNAVAILABLE, "Socket closed"))
            return
        results = [
            gw.StreamedCallResult(
                call_id=call.call_id,
                analyze_content=gw.AnalyzeContentResponse(summary="Summary.", model="fake"),
            )
            for call in request.calls
        ]
        self._answers.put_nowait(gw.StreamCallsResponse(results=results))

    async def read(self) -> object:
        answer = await self._answers.get()
        if isinstance(answer, Exception):
            raise answer
        return answer

    def done(self) -> bool:
        return False

    def cancel(self) -> bool:
        return True


class Stub:
    """Opens the given calls in turn."""

    def __init__(self, *calls: Any) -> None:
        self.calls = list(calls)
        self.opened = 0

    def StreamCalls(self, **_kwargs: Any) -> Any:
        self.opened += 1
        return self.calls.pop(0)


class ReadyChannel:
    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        return grpc.ChannelConnectivity.READY

    async def close(self, grace: float | None) -> None:
        return None


def a_job() -> Job:
    moment = datetime(2026, 12, 1, tzinfo=UTC)
    return Job(
        id="00000000-0000-4000-8000-000000000001",
        job_type=JobType.CARD_ANALYSIS,
        status=JobStatus.PROCESSING,
        target_id="t1",
        request_params={"text": "Some text."},
        requested_by="",
        request_id=None,
        result=None,
        error_message=None,
        error_code=None,
        error_reason=None,
        attempt_count=1,
        max_attempts=1,
        created_at=moment,
        updated_at=moment,
        started_at=moment,
        completed_at=None,
        failed_at=None,
        cancelled_at=None,
        cancel_reason=None,
        next_attempt_at=None,
        lease_expires_at=None,
        claim_token="token",
    )


def gateway_over(stub: Stub) -> StreamingAiGateway:
    gateway = StreamingAiGateway("127.0.0.1:1")
    gateway._channel = ReadyChannel()  # type: ignore[assignment]
    gateway._stub = stub  # type: ignore[assignment]
    return gateway


async def test_a_stream_that_cannot_be_opened_writes_nothing_and_its_calls_are_not_sent() -> None:
    call = UnconnectedCall()
    session = _Session(Stub(call))  # type: ignore[arg-type]
    future = session.submit(gw.StreamedCall(call_id="1"))
    with pytest.raises(_NotSent) as raised:
        await asyncio.wait_for(future, 5)
    assert raised.value.failure.code == "UNAVAILABLE"
    assert call.written == []
    await session.close()


async def test_a_call_written_before_the_stream_broke_is_not_sent_again() -> None:
    session = _Session(Stub(ConnectedCall(break_after_write=True)))  # type: ignore[arg-type]
    future = session.submit(gw.StreamedCall(call_id="1"))
    with pytest.raises(GatewayCallError) as raised:
        await asyncio.wait_for(future, 5)
    assert (raised.value.code, raised.value.message) == ("UNAVAILABLE", "Socket closed")
    await session.close()


async def test_run_sends_a_call_that_was_not_sent_again_on_a_new_stream() -> None:
    answering = ConnectedCall()
    stub = Stub(UnconnectedCall(), answering)
    gateway = gateway_over(stub)
    try:
        answer = await gateway.run(a_job(), deadline=5.0)
    finally:
        await gateway.close()
    assert answer.result["summary"] == "Summary."
    assert stub.opened == 2
    assert [c.job_id for request in answering.written for c in request.calls] == [a_job().id]


async def test_run_fails_a_call_never_sent_once_its_deadline_is_spent() -> None:
    stub = Stub(*(UnconnectedCall() for _ in range(100)))
    gateway = gateway_over(stub)
    try:
        with pytest.raises(GatewayCallError) as raised:
            await gateway.run(a_job(), deadline=0.3)
    finally:
        await gateway.close()
    assert raised.value.code == "UNAVAILABLE"
    assert raised.value.deadline_seconds == 0.3
    # Pauses of 50, 100, 200 ms between tries: no spin while the channel says it is
    # connected.
    assert 2 <= stub.opened <= 5, stub.opened


class RefusedCall(UnconnectedCall):
    """A stream the gateway ends at once with a status of its choosing."""

    async def wait_for_connection(self) -> None:
        await asyncio.Event().wait()  # the refusal arrives before the writer may write

    async def read(self) -> object:
        await asyncio.sleep(0)
        raise rpc_error(grpc.StatusCode.UNAUTHENTICATED, "no token")


async def test_a_stream_the_gateway_refuses_is_not_opened_again_and_again() -> None:
    stub = Stub(RefusedCall(), ConnectedCall())
    gateway = gateway_over(stub)
    try:
        with pytest.raises(GatewayCallError) as raised:
            await gateway.run(a_job(), deadline=5.0)
    finally:
        await gateway.close()
    assert raised.value.code == "UNAVAILABLE"
    assert "UNAUTHENTICATED" in raised.value.message
    assert stub.opened == 1


CORE_INTERNAL = rpc_error(grpc.StatusCode.INTERNAL, "Internal error from Core")


class RefusedWhileWriting:
    """A StreamCalls call the gateway ended (UNIMPLEMENTED, say) while the first write
    was under way: grpc's write fails and puts its own INTERNAL in place of the
    gateway's status, so the reader hears INTERNAL too (seen in a fresh-clone run, on
    a gateway without StreamCalls)."""

    def __init__(self) -> None:
        self.failed_writes = 0

    async def wait_for_connection(self) -> None:
        return None

    async def write(self, request: gw.StreamCallsRequest) -> None:
        self.failed_writes += 1
        raise CORE_INTERNAL

    async def read(self) -> object:
        await asyncio.sleep(0.01)
        raise CORE_INTERNAL

    def done(self) -> bool:
        return self.failed_writes > 0

    def cancel(self) -> bool:
        return True


async def test_a_call_whose_write_failed_is_not_sent_and_goes_again() -> None:
    """Its write failed, so the gateway never had it: it is not charged, and run()
    sends it again (here the gateway answers it on the next stream)."""
    refused = RefusedWhileWriting()
    session = _Session(Stub(refused))  # type: ignore[arg-type]
    future = session.submit(gw.StreamedCall(call_id="1"))
    with pytest.raises(_NotSent):
        await asyncio.wait_for(future, 5)
    await session.close()
    answering = ConnectedCall()
    gateway = gateway_over(Stub(RefusedWhileWriting(), answering))
    try:
        answer = await gateway.run(a_job(), deadline=5.0)
    finally:
        await gateway.close()
    assert answer.result["summary"] == "Summary."
