"""The openai backend against a real HTTP server on loopback (no client mocks)."""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator, Callable

import pytest

from san_jobs.ai_gateway.backends.openai import OpenAIBackend, parse_retry_after
from san_jobs.ai_gateway.errors import (
    BackendUnavailable,
    DeadlineExceeded,
    MalformedResponse,
    RateLimited,
    TokenLimitExceeded,
)
from san_jobs.ai_gateway.models import AnalyzeInput, RecallInput, RecallSource, TilInput
from tests.support.fake_openai_server import FakeOpenAI

MakeBackend = Callable[..., OpenAIBackend]


@pytest.fixture
async def make_backend(fake_openai: FakeOpenAI) -> AsyncIterator[MakeBackend]:
    made: list[OpenAIBackend] = []

    def make(chat: str = "ok", embedding: str = "ok", base_url: str | None = None) -> OpenAIBackend:
        backend = OpenAIBackend(
            base_url=base_url or fake_openai.base_url,
            api_key="sk-test",
            chat_model=chat,
            embedding_model=embedding,
            max_input_tokens=8192,
        )
        made.append(backend)
        return backend

    yield make
    for backend in made:
        await backend.aclose()


TEXT = AnalyzeInput(text="Queues hold jobs. Workers claim them.", title="Queues")


async def test_analyze_ok(make_backend: MakeBackend, fake_openai: FakeOpenAI) -> None:
    result = await make_backend().analyze(TEXT, 5.0)
    assert result.summary == "A fake summary."
    assert result.tags == ["fake", "upstream", "tags"]
    assert result.embedding == pytest.approx([0.6, 0.8])  # normalised to unit length
    kind, body, headers = fake_openai.requests[-2]
    assert kind == "chat"
    assert headers["authorization"] == "Bearer sk-test"
    assert body["response_format"] == {"type": "json_object"}


async def test_til_and_recall_ok(make_backend: MakeBackend) -> None:
    backend = make_backend()
    til = await backend.generate_til(TilInput("2024-05-01", ["a note"]), 5.0)
    assert til.title == "TIL fake"
    recall = await backend.generate_recall(RecallInput([RecallSource("t", "text")], 3), 5.0)
    assert recall.questions[0].source_index == 0


async def test_recall_tells_the_model_each_sources_key_terms(
    make_backend: MakeBackend, fake_openai: FakeOpenAI
) -> None:
    sources = [
        RecallSource("Leases", "A lease ends.", ("lease", "fencing token")),
        RecallSource("t", "x"),
    ]
    await make_backend().generate_recall(RecallInput(sources, 2), 5.0)
    kind, body, _ = fake_openai.requests[-1]
    prompt = body["messages"][-1]["content"]
    assert kind == "chat"
    assert "Source 0: Leases\nKey terms: lease, fencing token\nA lease ends." in prompt
    assert "Source 1: t\nx" in prompt


async def test_429_becomes_rate_limited_with_retry_after(make_backend: MakeBackend) -> None:
    with pytest.raises(RateLimited) as caught:
        await make_backend(chat="rate-limited").analyze(TEXT, 5.0)
    assert caught.value.retry_delay == 7.0
    # The upstream's words are logged, not passed on.
    assert caught.value.message == "upstream rate limit exceeded: HTTP 429 from the upstream API"


async def test_500_becomes_unavailable(make_backend: MakeBackend) -> None:
    with pytest.raises(
        BackendUnavailable, match=r"^backend unavailable: HTTP 500 from the upstream API$"
    ):
        await make_backend(chat="server-error").analyze(TEXT, 5.0)


async def test_401_becomes_unavailable(make_backend: MakeBackend) -> None:
    with pytest.raises(BackendUnavailable, match="HTTP 401"):
        await make_backend(chat="unauthorized").analyze(TEXT, 5.0)


async def test_connection_refused_becomes_unavailable(make_backend: MakeBackend) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(BackendUnavailable, match="ConnectError"):
        await make_backend(base_url=f"http://127.0.0.1:{port}/v1").analyze(TEXT, 5.0)


async def test_hang_past_deadline_becomes_deadline_exceeded(make_backend: MakeBackend) -> None:
    start = time.monotonic()
    with pytest.raises(DeadlineExceeded, match="did not answer within"):
        await make_backend(chat="hang").analyze(TEXT, 0.3)
    assert time.monotonic() - start < 2.0


async def test_broken_json_answer_becomes_malformed_with_parser_words(
    make_backend: MakeBackend,
) -> None:
    with pytest.raises(MalformedResponse) as caught:
        await make_backend(chat="broken-json").analyze(TEXT, 5.0)
    assert caught.value.message.startswith("JSON Parse Error at line 4, column")
    assert "Expecting value" in caught.value.message


async def test_non_json_body_becomes_malformed(make_backend: MakeBackend) -> None:
    with pytest.raises(MalformedResponse, match="JSON Parse Error at line 1"):
        await make_backend(chat="html-body").analyze(TEXT, 5.0)


async def test_broken_embedding_answer(make_backend: MakeBackend) -> None:
    with pytest.raises(MalformedResponse, match="JSON Parse Error"):
        await make_backend(embedding="html-body").analyze(TEXT, 5.0)


async def test_context_length_becomes_token_limit(make_backend: MakeBackend) -> None:
    with pytest.raises(TokenLimitExceeded) as caught:
        await make_backend(chat="context-length").analyze(TEXT, 5.0)
    assert caught.value.message == "Token limit exceeded (9001 > 8192)"


def test_retry_after_forms() -> None:
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(None) == 1.0
    assert parse_retry_after("soon") == 1.0
    assert 0.0 <= parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") <= 0.0
