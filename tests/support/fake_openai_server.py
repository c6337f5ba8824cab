"""A fake OpenAI-compatible HTTP server (starlette + uvicorn in a thread) for the tests."""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
import time
from typing import Any
from urllib.parse import quote, quote_plus

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

BROKEN_CONTENT = '{\n  "summary": "ok",\n  "tags": [\n    "a",,\n  ]\n}'
CONTEXT_MESSAGE = (
    "This model's maximum context length is 8192 tokens. However, your messages "
    "resulted in 9001 tokens. Please reduce the length of the messages."
)


# A model whose answers carry the provider's `usage` counts (chat: 111 prompt and 22
# completion tokens; embeddings: 7 prompt tokens). The other models' answers carry none.
WITH_USAGE = "with-usage"


def _chat_answer(system: str) -> dict[str, Any]:
    if '"summary"' in system:
        return {"summary": "A fake summary.", "tags": ["fake", "upstream", "tags"]}
    if '"title"' in system:
        return {"title": "TIL fake", "body": "## Fake\n\n- note\n"}
    return {"questions": [{"question": "Q?", "answer": "A", "source_index": 0}]}


def _echo_key(status: int, authorization: str, headers: dict[str, str] | None = None) -> Response:
    """An error whose body echoes the caller's credentials, as some upstreams do."""
    key = authorization.removeprefix("Bearer ")
    message = f"Incorrect API key provided: {key}. Header was: Authorization: {authorization}"
    return JSONResponse(
        {"error": {"message": message, "code": "invalid_api_key"}},
        status_code=status,
        headers=headers,
    )


def _echo_key_encoded(authorization: str) -> Response:
    """A 401 whose plain-text body echoes the key URL-encoded and JSON-escaped, as an
    upstream quoting the query string or its own JSON might."""
    key = authorization.removeprefix("Bearer ")
    json_escaped = json.dumps(key)[1:-1].replace("/", "\\/")
    body = (
        f"invalid key: GET /v1?key={quote(key, safe='')} "
        f"form: api_key={quote_plus(key)} json: {json_escaped}"
    )
    return PlainTextResponse(body, status_code=401)


async def _endless() -> Any:
    for _ in range(64):  # chunked, no length: 1 MiB pieces, far past any cap
        yield b" " * (1024 * 1024)


def _gzip_bomb() -> Response:  # 64 MiB of spaces in about 64 KiB
    bomb = gzip.compress(b" " * (64 * 1024 * 1024))
    return Response(bomb, media_type="application/json", headers={"Content-Encoding": "gzip"})


# Answers far larger than any upstream answer should be: the gateway must not read them whole.
_HUGE_BODIES: dict[str, Any] = {
    "huge-body": lambda: Response(b" " * (64 * 1024 * 1024), media_type="application/json"),
    "endless-body": lambda: StreamingResponse(_endless(), media_type="application/json"),
    "gzip-bomb": _gzip_bomb,
}


async def _behave(model: str, authorization: str = "") -> Response | None:
    """The failure a model name asks for, or None for a normal answer.

    ``echo-key-STATUS``: that HTTP status, the body echoing the API key;
    ``retry-after=VALUE``: a 429 with that Retry-After header (and the key echoed).
    """
    if model == "echo-key-encoded":
        return _echo_key_encoded(authorization)
    if model.startswith("echo-key-"):
        return _echo_key(int(model.removeprefix("echo-key-")), authorization)
    if model.startswith("retry-after="):
        return _echo_key(429, authorization, {"Retry-After": model.removeprefix("retry-after=")})
    if model == "rate-limited":
        return JSONResponse(
            {"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}},
            status_code=429,
            headers={"Retry-After": "7"},
        )
    if model == "server-error":
        return JSONResponse({"error": {"message": "upstream exploded"}}, status_code=500)
    if model == "hang":
        await asyncio.sleep(10)
    if model == "context-length":
        return JSONResponse(
            {"error": {"message": CONTEXT_MESSAGE, "code": "context_length_exceeded"}},
            status_code=400,
        )
    if model == "html-body":
        return PlainTextResponse("<html>\n<body>\nBad gateway\n</body>", status_code=200)
    if model in _HUGE_BODIES:
        return _HUGE_BODIES[model]()
    if model == "unauthorized":
        return JSONResponse({"error": {"message": "bad key"}}, status_code=401)
    return None


async def chat(request: Request) -> Response:
    body = await request.json()
    request.app.state.requests.append(("chat", body, dict(request.headers)))
    failure = await _behave(body["model"], request.headers.get("authorization", ""))
    if failure is not None:
        return failure
    content = (
        BROKEN_CONTENT
        if body["model"] == "broken-json"
        else json.dumps(_chat_answer(body["messages"][0]["content"]))
    )
    answer: dict[str, Any] = {"choices": [{"message": {"role": "assistant", "content": content}}]}
    if body["model"] == WITH_USAGE:
        answer["usage"] = {"prompt_tokens": 111, "completion_tokens": 22, "total_tokens": 133}
    return JSONResponse(answer)


async def embeddings(request: Request) -> Response:
    body = await request.json()
    request.app.state.requests.append(("embeddings", body, dict(request.headers)))
    failure = await _behave(body["model"], request.headers.get("authorization", ""))
    if failure is not None:
        return failure
    answer: dict[str, Any] = {"data": [{"embedding": [3.0, 4.0]}]}
    if body["model"] == WITH_USAGE:
        answer["usage"] = {"prompt_tokens": 7, "total_tokens": 7}
    return JSONResponse(answer)


class FakeOpenAI:
    """A real HTTP server on a loopback port, run by uvicorn in a thread."""

    def __init__(self) -> None:
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", chat, methods=["POST"]),
                Route("/v1/embeddings", embeddings, methods=["POST"]),
            ]
        )
        self.app.state.requests = []
        config = uvicorn.Config(
            self.app,
            host="127.0.0.1",
            port=0,
            log_level="warning",
            lifespan="off",
            timeout_graceful_shutdown=1,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def requests(self) -> list[tuple[str, dict[str, Any], dict[str, str]]]:
        return self.app.state.requests  # type: ignore[no-any-return]

    @property
    def base_url(self) -> str:
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "fake OpenAI server did not start"
            time.sleep(0.01)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
