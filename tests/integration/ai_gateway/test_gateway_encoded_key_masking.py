"""An upstream that echoes the API key encoded (URL-encoded in a query string or a
form, JSON-escaped) has it masked in the gateway's log as well as one echoing it as
it is: a real gateway on a loopback port, the openai backend, and a fake upstream HTTP
server on 127.0.0.1 whose 401 body quotes the key those ways."""

from __future__ import annotations

import logging
from urllib.parse import quote, quote_plus

import grpc
import pytest
from gateway_helpers import StartGateway, rich

from san_jobs.proto.aigateway.v1 import ai_gateway_pb2 as pb
from tests.support.fake_openai_server import FakeOpenAI

# Keys whose URL-encoded and JSON-escaped forms differ from the key itself.
KEYS = ["sk-proj-Abc/123+SECRETdef=456ghi789", "plain/Secret+0123456789=xyz"]
TEXT = pb.AnalyzeContentRequest(text="Queues hold jobs. Workers claim them.")


@pytest.mark.parametrize("key", KEYS)
async def test_an_encoded_echo_of_the_key_is_masked_in_the_log(
    start_gateway: StartGateway,
    fake_openai: FakeOpenAI,
    caplog: pytest.LogCaptureFixture,
    key: str,
) -> None:
    caplog.set_level(logging.INFO)
    stub = await start_gateway(
        backend="openai",
        openai_base_url=fake_openai.base_url,
        openai_api_key=key,
        openai_chat_model="echo-key-encoded",
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.AnalyzeContent(TEXT, timeout=10)
    assert rich(caught.value).info.reason == "BACKEND_UNAVAILABLE"
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "HTTP 401" in logged and "invalid key: GET /v1?key=***" in logged, logged
    for form in {key, quote(key, safe=""), quote_plus(key), key.replace("/", "\\/")}:
        assert form not in logged
    assert "Secret" not in logged.replace("SECRET", "Secret")  # no piece of either key
