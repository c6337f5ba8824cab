"""A real ai-gateway with `--backend openai` against a fake upstream in this test:
the fallback serves while the upstream answers 503 (its circuit keeps the upstream's
hits few), the primary serves again once it is back, and the result cache answers an
identical call without reaching the upstream."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
import pytest

from san_jobs.proto.aigateway.v1 import ai_gateway_pb2 as pb
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2_grpc as pb_grpc
from tests.support.processes import running, start_gateway

pytestmark = pytest.mark.acceptance

LOCAL_MODEL = "local-textrank-v1"
EMBEDDING_MODEL = "text-embedding-3-small"
CHAT_ANSWER = json.dumps({"summary": "An upstream summary.", "tags": ["up", "stream", "tags"]})


class Upstream:
    """An OpenAI-compatible HTTP server in a thread: healthy, or answering 503 to
    everything while ``down``; counts every request it gets."""

    def __init__(self) -> None:
        self.down = False
        self.hits = 0
        self._lock = threading.Lock()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                with upstream._lock:
                    upstream.hits += 1
                    down = upstream.down
                if down:
                    self._answer(503, {"error": {"message": "overloaded"}})
                elif self.path.endswith("/embeddings"):
                    self._answer(200, {"data": [{"embedding": [3.0, 4.0]}]})
                else:
                    message = {"role": "assistant", "content": CHAT_ANSWER}
                    self._answer(200, {"choices": [{"message": message}]})

            def _answer(self, status: int, body: object) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass  # quiet

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    server.thread.start()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()


def _embed(stub: pb_grpc.AiGatewayServiceStub, text: str) -> pb.EmbedResponse:
    response: pb.EmbedResponse = stub.Embed(pb.EmbedRequest(text=text), timeout=10)
    return response


def test_the_fallback_serves_an_outage_and_the_primary_comes_back(
    upstream: Upstream, tmp_path: Path
) -> None:
    upstream.down = True
    cooldown = 3.0
    gateway = start_gateway(
        tmp_path,
        "--backend",
        "openai",
        "--openai-base-url",
        upstream.base_url,
        "--fallback-backend",
        "local",
        "--primary-failures",
        "2",
        "--fallback-cooldown",
        str(cooldown),
    )
    with running(gateway), grpc.insecure_channel(gateway.address) as channel:
        stub = pb_grpc.AiGatewayServiceStub(channel)
        started = time.monotonic()
        models = [_embed(stub, f"text number {i}").model for i in range(20)]
        elapsed = time.monotonic() - started
        assert models == [LOCAL_MODEL] * 20
        # Two failures open the circuit; then at most one probe per cooldown.
        assert 2 <= upstream.hits <= 2 + int(elapsed / cooldown)
        assert "primary backend openai circuit open after 2 transient failures" in gateway.log()

        upstream.down = False
        hits_before = upstream.hits
        # The primary is probed again only once the cooldown has passed: poll (the
        # cooldown is time, not an event) until it serves, within a bound.
        give_up = time.monotonic() + cooldown + 10
        while (model := _embed(stub, "after the outage").model) != EMBEDDING_MODEL:
            assert time.monotonic() < give_up, gateway.log_tail()
            time.sleep(0.1)
        assert upstream.hits == hits_before + 1  # the probe, which served
        assert _embed(stub, "and then").model == EMBEDDING_MODEL
        assert model == EMBEDDING_MODEL
    log = gateway.log()
    assert "primary backend openai circuit closed: it answered again after" in log
    assert log.count("circuit open") == 1


def test_an_identical_call_is_answered_from_the_cache(upstream: Upstream, tmp_path: Path) -> None:
    gateway = start_gateway(
        tmp_path,
        "--backend",
        "openai",
        "--openai-base-url",
        upstream.base_url,
        "--cache-entries",
        "100",
    )
    with running(gateway), grpc.insecure_channel(gateway.address) as channel:
        stub = pb_grpc.AiGatewayServiceStub(channel)
        first = _embed(stub, "the same text")
        assert upstream.hits == 1
        second = _embed(stub, "the same text")
        assert upstream.hits == 1  # not reached again
        assert list(second.vector) == list(first.vector)
        assert second.model == first.model == EMBEDDING_MODEL
        assert not first.usage.cached
        assert second.usage.cached
        assert (second.usage.input_tokens, second.usage.output_tokens) == (0, 0)

        _embed(stub, "another text")
        assert upstream.hits == 2
        request = pb.AnalyzeContentRequest(text="A text to analyse. It has two sentences.")
        analyzed = [stub.AnalyzeContent(request, timeout=10) for _ in range(3)]
        assert upstream.hits == 4  # one chat and one embedding call, once
        assert [a.summary for a in analyzed] == ["An upstream summary."] * 3
