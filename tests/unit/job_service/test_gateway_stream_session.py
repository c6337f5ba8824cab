"""The StreamCalls session's own rules, on a stand-in for the grpc call: every
message respects the gateway's caps (calls per message, calls in flight per
stream, call_id length), calls too big to send are refused before they are
queued, and a stream's end is UNAVAILABLE for every call on it."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from san_jobs.job_service.domain.failures import GatewayCallError, describe_gateway_error
from san_jobs.job_service.gateway_client import CALL_OVERHEAD_BYTES, check_call_size, max_call_bytes
from san_jobs.job_service.gateway_stream import (
    MAX_CALL_ID_CHARS,
    MAX_CALLS_IN_FLIGHT,
    MAX_CALLS_PER_MESSAGE,
    _Session,
    stream_ended,
)
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2 as gw


class FakeStreamCall:
    """Records what the session writes; reads what the test answers."""

    def __init__(self) -> None:
        self.written: list[gw.StreamCallsRequest] = []
        self.answers: asyncio.Queue[object] = asyncio.Queue()

    async def wait_for_connection(self) -> None:
        return None

    async def write(self, request: gw.StreamCallsRequest) -> None:
        self.written.append(request)

    async def read(self) -> object:
        return await self.answers.get()

    def cancel(self) -> bool:
        return True


class FakeStub:
    def __init__(self) -> None:
        self.call = FakeStreamCall()

    def StreamCalls(self, **_kwargs: Any) -> FakeStreamCall:
        return self.call


def sent_ids(call: FakeStreamCall) -> list[str]:
    return [c.call_id for request in call.written for c in request.calls]


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_messages_respect_the_gateway_caps() -> None:
    stub = FakeStub()
    session = _Session(stub)  # type: ignore[arg-type]
    try:
        total = MAX_CALLS_IN_FLIGHT + 700
        futures = [session.submit(gw.StreamedCall(call_id=str(i))) for i in range(total)]
        await settle()
        assert all(len(r.calls) <= MAX_CALLS_PER_MESSAGE for r in stub.call.written)
        assert len(sent_ids(stub.call)) == MAX_CALLS_IN_FLIGHT, "no more in flight than the cap"
        # Results free room: the calls held back go out.
        answered = [gw.StreamedCallResult(call_id=str(i)) for i in range(600)]
        await stub.call.answers.put(gw.StreamCallsResponse(results=answered))
        await settle()
        assert len(sent_ids(stub.call)) == MAX_CALLS_IN_FLIGHT + 600
        assert all(f.done() for f in futures[:600])
        # Cancelling a sent call also frees its place.
        for i in range(600, 700):
            session.cancel(str(i))
        await settle()
        assert len(sent_ids(stub.call)) == total
        assert all(len(r.calls) <= MAX_CALLS_PER_MESSAGE for r in stub.call.written)
        assert all(len(r.cancel_call_ids) <= MAX_CALLS_PER_MESSAGE for r in stub.call.written)
        assert sorted(sent_ids(stub.call), key=int) == [str(i) for i in range(total)]
        assert all(len(call_id) <= MAX_CALL_ID_CHARS for call_id in sent_ids(stub.call))
    finally:
        await session.close()


@pytest.mark.parametrize(
    ("code", "details", "expected"),
    [
        (grpc.StatusCode.UNAVAILABLE, "Socket closed", "Socket closed"),
        (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "Sent message larger than max (17 vs. 16)",
            "the call stream ended (RESOURCE_EXHAUSTED: Sent message larger than max (17 vs. 16))",
        ),
        (grpc.StatusCode.INVALID_ARGUMENT, "", "the call stream ended (INVALID_ARGUMENT)"),
        (grpc.StatusCode.INTERNAL, "oops", "the call stream ended (INTERNAL: oops)"),
    ],
)
def test_a_stream_s_end_is_unavailable_for_each_call(
    code: grpc.StatusCode, details: str, expected: str
) -> None:
    error = grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)
    failure = describe_gateway_error(stream_ended(error))
    assert (failure.code, failure.transient) == ("UNAVAILABLE", True)
    assert failure.message == f"AI gateway unavailable: {expected}"


def test_a_call_above_the_limit_is_refused_for_good() -> None:
    limit = max_call_bytes(4 * 1024 * 1024)
    assert limit == 4 * 1024 * 1024 + CALL_OVERHEAD_BYTES
    check_call_size(limit, limit, 30.0)  # at the limit: sent
    with pytest.raises(GatewayCallError) as raised:
        check_call_size(limit + 1, limit, 30.0)
    failure = describe_gateway_error(raised.value)
    assert (failure.code, failure.reason, failure.transient) == (
        "INVALID_ARGUMENT",
        "REQUEST_TOO_LARGE",
        False,
    )
    assert failure.message == (
        "Request too large for the AI gateway: 4,259,841 bytes, more than the 4,259,840 "
        "bytes allowed (--max-message-bytes plus 64 KiB); it was not sent"
    )
