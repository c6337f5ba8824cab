"""Upstream values are untrusted: through a real gateway (gRPC on loopback) and the fake
OpenAI-compatible server, an upstream error body that echoes the API key never reaches
a caller nor the log unmasked, and every Retry-After becomes a finite, clamped RetryInfo."""

from __future__ import annotations

import logging
from typing import Any

import grpc
import pytest
from gateway_helpers import StartGateway, rich, rich_status
from test_gateway_stream import CLIENT, analyze, open_stream, read_results, send

from san_jobs.ai_gateway.backends.openai import parse_retry_after
from san_jobs.ai_gateway.errors import MAX_RETRY_DELAY
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2 as pb
from tests.support.fake_openai_server import FakeOpenAI

KEYS = ["sk-proj-Abc123SECRETdef456ghi789", "plain-Secret-0123456789xyz"]
TEXT = pb.AnalyzeContentRequest(text="Queues hold jobs. Workers claim them.")


async def openai_gateway(
    start_gateway: StartGateway, fake_openai: FakeOpenAI, key: str, model: str
) -> Any:
    return await start_gateway(
        backend="openai",
        openai_base_url=fake_openai.base_url,
        openai_api_key=key,
        openai_chat_model=model,
    )


def trailers_text(err: grpc.aio.AioRpcError) -> str:
    """Everything the caller receives about a failure, as text (details and trailers)."""
    parts = [err.details() or ""]
    for key, value in err.trailing_metadata() or ():
        parts.append(value.decode("latin-1") if isinstance(value, bytes) else str(value))
        parts.append(key)
    return "\n".join(parts)


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize(
    ("status", "message"),
    [
        (401, "backend rejected the request: HTTP 401 from the upstream API"),
        (403, "backend rejected the request: HTTP 403 from the upstream API"),
        (404, "backend rejected the request: HTTP 404 from the upstream API"),
        (400, "backend rejected the request: HTTP 400 from the upstream API"),
        (500, "backend unavailable: HTTP 500 from the upstream API"),
        (503, "backend unavailable: HTTP 503 from the upstream API"),
    ],
)
async def test_an_upstream_error_echoing_the_key_never_reaches_callers_or_logs(
    start_gateway: StartGateway,
    fake_openai: FakeOpenAI,
    caplog: pytest.LogCaptureFixture,
    key: str,
    status: int,
    message: str,
) -> None:
    caplog.set_level(logging.INFO)
    stub = await openai_gateway(start_gateway, fake_openai, key, f"echo-key-{status}")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.AnalyzeContent(TEXT, metadata=CLIENT)
    err = rich(caught.value)
    assert (err.code, err.info.reason) == (grpc.StatusCode.UNAVAILABLE, "BACKEND_UNAVAILABLE")
    assert err.message == message
    assert key not in trailers_text(caught.value)
    # The same on a StreamCalls stream: the call's result carries the fixed message only.
    stream = open_stream(stub)
    await send(stream, analyze("c1", TEXT.text))
    result = (await read_results(stream, 1))["c1"]
    assert rich_status(result.error).message == message
    assert key.encode() not in result.SerializeToString()
    stream.cancel()
    # The log holds the details, for the operator, with the key masked.
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert f"HTTP {status}" in logged and "Incorrect API key provided" in logged
    assert key not in logged
    assert key[:6] not in logged.replace("sk-***", "")  # no part of the key either


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("7", 7.0),
        ("2592000", MAX_RETRY_DELAY),
        ("1e12", MAX_RETRY_DELAY),
        ("inf", MAX_RETRY_DELAY),
        ("nan", 1.0),
        ("-5", 1.0),
        ("soon", 1.0),
        ("Fri, 31 Dec 9999 23:59:59 GMT", MAX_RETRY_DELAY),
        ("Thu, 01 Jan 1970 00:00:00 GMT", 0.0),
        ("Mon, 99 Foo 99999 99:99:99 XYZ", 1.0),
    ],
)
async def test_every_retry_after_becomes_a_finite_clamped_retry_info(
    start_gateway: StartGateway,
    fake_openai: FakeOpenAI,
    header: str,
    expected: float,
) -> None:
    stub = await openai_gateway(start_gateway, fake_openai, KEYS[0], f"retry-after={header}")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.AnalyzeContent(TEXT, metadata=CLIENT)
    err = rich(caught.value)  # never UNKNOWN: a rich RESOURCE_EXHAUSTED
    assert (err.code, err.info.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "RATE_LIMITED")
    assert err.message == "upstream rate limit exceeded: HTTP 429 from the upstream API"
    assert err.retry_seconds == pytest.approx(expected)
    assert KEYS[0] not in trailers_text(caught.value)


@pytest.mark.parametrize(
    "value", ["2592000", "1e12", "1e400", "inf", "-inf", "nan", "-1", "", "0x10", "Σ"]
)
def test_parse_retry_after_is_always_finite_and_bounded(value: str) -> None:
    delay = parse_retry_after(value)
    assert 0.0 <= delay <= MAX_RETRY_DELAY


@pytest.mark.parametrize("model", ["huge-body", "endless-body", "gzip-bomb"])
async def test_an_upstream_body_too_large_is_refused_without_reading_it_whole(
    start_gateway: StartGateway, fake_openai: FakeOpenAI, model: str
) -> None:
    gateway = await openai_gateway(start_gateway, fake_openai, KEYS[0], model)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gateway.AnalyzeContent(TEXT, metadata=CLIENT, timeout=30)
    err = caught.value
    assert err.code() == grpc.StatusCode.INTERNAL
    assert rich(err).info.reason == "MALFORMED_RESPONSE"
    assert err.details().startswith("the upstream answer is larger than 8,388,608 bytes")
