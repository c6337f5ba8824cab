"""StreamCalls bounds over a real grpc.aio server on 127.0.0.1:0: a call the gateway
cannot take fails alone, never the stream; a caller that sends and never reads gets
backpressure (the gateway stops reading); call_id length and calls per message are capped."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from gateway_helpers import StartGateway, rich, rich_status, wait_until
from test_gateway_stream import CLIENT, analyze, open_stream, read_results, send, stream_error

from san_jobs.ai_gateway.backends.instant import InstantBackend
from san_jobs.ai_gateway.bounds import MAX_CALL_ID_CHARS, MAX_CALLS_PER_MESSAGE
from san_jobs.ai_gateway.models import AnalyzeInput, AnalyzeResult
from san_jobs.ai_gateway.server import GatewayServer
from san_jobs.ai_gateway.settings import GatewaySettings
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2 as pb
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2_grpc as pb_grpc

MIB = 1024 * 1024
# The tests' own channels take big messages, so that what fails is the gateway's choice.
BIG_CHANNEL = [
    ("grpc.max_receive_message_length", 64 * MIB),
    ("grpc.max_send_message_length", 64 * MIB),
]


def til(call_id: str, *notes: str, day: str = "2024-01-01") -> pb.StreamedCall:
    request = pb.GenerateTilRequest(day=day, notes=notes)
    return pb.StreamedCall(call_id=call_id, generate_til=request)


async def big_stub(start_gateway: StartGateway, **settings: Any) -> Any:
    await start_gateway(**settings)
    channel = grpc.aio.insecure_channel(
        f"127.0.0.1:{start_gateway.port}",  # type: ignore[attr-defined]
        options=BIG_CHANNEL,
    )
    return channel, pb_grpc.AiGatewayServiceStub(channel)


async def test_a_result_over_4_mib_fails_that_call_alone(start_gateway: StartGateway) -> None:
    # The instant backend's TIL body is the notes: a 5 MB note makes a 5 MB result.
    channel, stub = await big_stub(start_gateway, backend="instant", max_input_tokens=10**8)
    async with channel:
        stream = open_stream(stub)
        await send(stream, til("huge", "x" * (5 * MIB)), til("small", "a note"))
        results = await read_results(stream, 2)
        err = rich_status(results["huge"].error)
        assert (err.code, err.info.reason) == (grpc.StatusCode.INTERNAL, "MALFORMED_RESPONSE")
        assert "too large" in err.message
        assert results["small"].generate_til.body == "- a note\n"
        # The stream lives on: the next call is answered.
        await send(stream, til("after", "later"))
        assert (await read_results(stream, 1))["after"].generate_til.body == "- later\n"
        stream.cancel()
        # The unary RPC refuses the same result the same way.
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GenerateTil(til("u", "y" * (5 * MIB)).generate_til)
        unary = rich(caught.value)
        assert (unary.code, unary.info.reason) == (err.code, err.info.reason)


async def test_a_10_mib_request_message_is_accepted(start_gateway: StartGateway) -> None:
    # Up to --max-message-bytes (16 MiB by default) of calls per message: more than
    # JobService may send (its own 4 MiB limit per call, plus envelope).
    channel, stub = await big_stub(start_gateway, backend="instant", max_input_tokens=10**8)
    async with channel:
        stream = open_stream(stub)
        await send(stream, *(til(str(i), "z" * (2 * MIB)) for i in range(5)))
        results = await read_results(stream, 5)
        assert all(r.WhichOneof("outcome") == "generate_til" for r in results.values())
        stream.cancel()


async def test_max_message_bytes_is_the_servers_receive_limit(
    start_gateway: StartGateway,
) -> None:
    channel, stub = await big_stub(
        start_gateway, backend="instant", max_message_bytes=2 * MIB, max_input_tokens=10**8
    )
    async with channel:
        stream = open_stream(stub)
        await send(stream, til("big", "z" * (3 * MIB)))
        assert (await stream_error(stream)).code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        # Results are capped below the send limit: what could not go out fails alone.
        stream = open_stream(stub)
        await send(stream, til("near", "n" * (2 * MIB - 16 * 1024)), til("ok", "fine"))
        results = await read_results(stream, 2)
        assert rich_status(results["near"].error).info.reason == "MALFORMED_RESPONSE"
        assert results["ok"].generate_til.body == "- fine\n"
        stream.cancel()


async def test_many_bad_notes_give_a_bounded_error(start_gateway: StartGateway) -> None:
    stub = await start_gateway(backend="instant")
    stream = open_stream(stub)
    await send(stream, til("blank", *([" "] * 5000), day="d" * 1_000_000))
    err = rich_status((await read_results(stream, 1))["blank"].error)
    assert (err.code, err.info.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_REQUEST")
    assert err.bad_request is not None
    violations = err.bad_request.field_violations
    assert violations[0].field == "day" and len(violations[0].description) < 200
    assert 1 < len(violations) <= 102
    assert "more" in violations[-1].description
    assert len(err.message) < 20_000
    stream.cancel()


@pytest.mark.parametrize(
    ("calls", "field"),
    [
        ([analyze("a"), analyze("x" * (MAX_CALL_ID_CHARS + 1))], "calls[1].call_id"),
        ([analyze(str(i)) for i in range(MAX_CALLS_PER_MESSAGE + 1)], "calls"),
    ],
)
async def test_call_id_length_and_calls_per_message_are_capped(
    start_gateway: StartGateway, calls: list[pb.StreamedCall], field: str
) -> None:
    stub = await start_gateway(backend="instant")
    stream = open_stream(stub)
    await send(stream, *calls)
    err = rich(await stream_error(stream))
    assert (err.code, err.info.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_REQUEST")
    assert err.bad_request is not None
    assert [v.field for v in err.bad_request.field_violations] == [field]
    assert len(err.message) < 1000  # the long id is not echoed whole


async def test_the_caps_themselves_are_accepted(start_gateway: StartGateway) -> None:
    stub = await start_gateway(backend="instant")
    stream = open_stream(stub)
    calls = [analyze(f"{i:0{MAX_CALL_ID_CHARS}d}") for i in range(MAX_CALLS_PER_MESSAGE)]
    await send(stream, *calls)
    results = await read_results(stream, MAX_CALLS_PER_MESSAGE)
    assert all(r.WhichOneof("outcome") == "analyze_content" for r in results.values())
    stream.cancel()


class BigAnswers(InstantBackend):
    """Each analyze call answers a 64 KiB summary: small calls, big results."""

    def __init__(self) -> None:
        self.started = 0

    async def analyze(self, request: AnalyzeInput, time_left: float | None) -> AnalyzeResult:
        self.started += 1
        return AnalyzeResult("s" * (64 * 1024), ["t"], [1.0], "big")


async def test_a_caller_that_never_reads_stops_the_reader() -> None:
    backend = BigAnswers()
    limit = 20
    settings = GatewaySettings(listen="127.0.0.1:0", max_stream_calls=limit)
    server = GatewayServer(settings, backend)
    await server.start()
    sent = 2000  # 128 MiB of results, were they all made
    try:
        # No BDP probing: the stream's receive window stays small (64 KiB).
        options = [("grpc.http2.bdp_probe", 0)]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}", options) as channel:
            stream = open_stream(pb_grpc.AiGatewayServiceStub(channel), CLIENT)
            for start in range(0, sent, 100):
                await send(stream, *(analyze(str(i)) for i in range(start, start + 100)))
            # Nothing is read: the results fill the connection's flow-control windows,
            # the writer blocks, unsent results reach the limit and the reader pauses.
            (calls,) = server.servicer._streams
            await wait_until(
                lambda: calls.paused and calls.writing, "the gateway to stop reading", limit=30
            )
            started = backend.started
            # Give a reader that would not stop every chance to go on (it never can
            # fail a correct gateway: nothing changes while the caller does not read).
            await asyncio.sleep(0.5)
            assert calls.paused and calls.writing
            assert backend.started == started
            assert calls.pending <= limit
            # Only what the network buffers took, plus the bound, was ever started.
            assert started < 200, started
            # The caller reads again: the reader resumes and every call is answered once.
            results = await read_results(stream, sent)
            assert len(results) == sent
            assert all(r.WhichOneof("outcome") == "analyze_content" for r in results.values())
            assert backend.started == sent
            stream.cancel()
    finally:
        await server.stop(0)


def test_the_stream_bound_is_a_setting() -> None:
    assert GatewaySettings().max_stream_calls == 1000
    assert GatewaySettings().max_message_bytes == 16 * MIB
