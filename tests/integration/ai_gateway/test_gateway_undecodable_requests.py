"""Issue 22, point 10: bytes that are not a valid message, sent to any AiGateway RPC,
answer INVALID_ARGUMENT naming the request, never UNKNOWN, with at most one log
line (rate-limited) and no traceback; a stranger still gets UNAUTHENTICATED.

Raw bytes over a real grpc channel (identity serializers) to an in-process gateway.
"""

from __future__ import annotations

import logging
from pathlib import Path

import grpc
import pytest
from gateway_helpers import StartGateway, bearer, rich, write_caller_tokens

from san_jobs.proto.aigateway.v1 import ai_gateway_pb2 as pb

TOKEN = "js-" + "k" * 40
UNARY = ["AnalyzeContent", "GenerateTil", "GenerateRecall", "Embed"]
# Field 1 (a string in every request) holding bytes that are not UTF-8, and a
# truncated length-delimited field.
BAD_UTF8 = b"\x0a\x02\xff\xfe"
TRUNCATED = b"\x0a\x10abc"
SERVICE = "/san.aigateway.v1.AiGatewayService/"


def identity(data: bytes) -> bytes:
    return data


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    return write_caller_tokens(tmp_path / "callers", **{"job-service": TOKEN})


@pytest.mark.parametrize("payload", [BAD_UTF8, TRUNCATED], ids=["bad-utf8", "truncated"])
@pytest.mark.parametrize("method", UNARY)
async def test_unary_rpcs_answer_invalid_argument(
    start_gateway: StartGateway,
    tokens_file: Path,
    method: str,
    payload: bytes,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await start_gateway(backend="instant", caller_tokens_file=tokens_file)
    port = start_gateway.port  # type: ignore[attr-defined]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(
            SERVICE + method, request_serializer=identity, response_deserializer=identity
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call(payload, metadata=bearer(TOKEN), timeout=10)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        details = rich(refused.value)
        assert details.info.reason == "INVALID_REQUEST"
        assert details.bad_request is not None
        violation = details.bad_request.field_violations[0]
        assert violation.field == "request"
        assert "is not a valid san.aigateway.v1." in violation.description
        # A stranger learns nothing about its bytes: UNAUTHENTICATED first.
        with pytest.raises(grpc.aio.AioRpcError) as stranger:
            await call(payload, timeout=10)
        assert stranger.value.code() == grpc.StatusCode.UNAUTHENTICATED
    logged = _logged_by_this_test(caplog)
    assert "Traceback" not in logged
    assert "Exception deserializing" not in logged


def _logged_by_this_test(caplog: pytest.LogCaptureFixture) -> str:
    """What was logged, less grpc's process-wide poller reporting, through asyncio, an
    event for an earlier test's event loop, closed since ("Event loop is closed"):
    nothing this gateway did (it failed this test once in a full run)."""
    kept = [
        record
        for record in caplog.records
        if not (
            record.name == "asyncio"
            and record.exc_info is not None
            and "Event loop is closed" in str(record.exc_info[1])
        )
    ]
    return "\n".join(caplog.handler.format(record) for record in kept)


async def test_stream_calls_ends_with_invalid_argument(
    start_gateway: StartGateway, tokens_file: Path
) -> None:
    await start_gateway(backend="instant", caller_tokens_file=tokens_file)
    port = start_gateway.port  # type: ignore[attr-defined]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stream = channel.stream_stream(
            SERVICE + "StreamCalls", request_serializer=identity, response_deserializer=identity
        )
        call = stream(metadata=bearer(TOKEN), timeout=10)
        # One good call first: the stream works, then a bad message ends it.
        good = pb.StreamCallsRequest(
            calls=[pb.StreamedCall(call_id="c1", embed=pb.EmbedRequest(text="queues"))]
        )
        await call.write(good.SerializeToString())
        answer = pb.StreamCallsResponse.FromString(await call.read())
        assert [result.call_id for result in answer.results] == ["c1"]
        await call.write(b"\x0a\x05\x0a\x02\xff\xfe")  # calls[0].call_id not UTF-8
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            while True:
                await call.read()
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert rich(refused.value).info.reason == "INVALID_REQUEST"
        # The gateway serves on.
        unary = channel.unary_unary(
            SERVICE + "Embed", request_serializer=identity, response_deserializer=identity
        )
        embedded = pb.EmbedResponse.FromString(
            await unary(
                pb.EmbedRequest(text="queues").SerializeToString(),
                metadata=bearer(TOKEN),
                timeout=10,
            )
        )
        assert len(embedded.vector) > 0


async def test_many_bad_requests_log_one_line(
    start_gateway: StartGateway, tokens_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await start_gateway(backend="instant", caller_tokens_file=tokens_file)
    port = start_gateway.port  # type: ignore[attr-defined]
    caplog.set_level(logging.DEBUG)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(
            SERVICE + "Embed", request_serializer=identity, response_deserializer=identity
        )
        for _ in range(50):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call(BAD_UTF8, metadata=bearer(TOKEN), timeout=10)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    lines = [r for r in caplog.records if "undecodable" in r.getMessage()]
    assert len(lines) <= 1, [r.getMessage() for r in lines]
    assert not [r for r in caplog.records if r.exc_info], "no traceback for a bad request"
    assert all(r.levelno < logging.ERROR for r in caplog.records)
