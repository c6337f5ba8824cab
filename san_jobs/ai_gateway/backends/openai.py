"""The ``openai`` backend: any OpenAI-compatible HTTP API (chat completions, embeddings).

Failures are translated here, at the HTTP boundary, into the gateway's own errors:

=============================================  ==========================================
upstream                                       gateway error
=============================================  ==========================================
429 (``Retry-After`` seconds or HTTP date)     RateLimited (retry_delay from the header,
                                               finite, at most MAX_RETRY_DELAY = 300 s)
5xx, connection refused/reset, other 4xx       BackendUnavailable
no answer within the caller's deadline         DeadlineExceeded
400 ``context_length_exceeded``                TokenLimitExceeded (numbers from upstream)
body or model answer not the expected JSON     MalformedResponse ("JSON Parse Error at ...")
=============================================  ==========================================

Upstream text is untrusted (an error body may echo the API key): callers get fixed
messages that name the HTTP status only, e.g. "backend rejected the request: HTTP 401
from the upstream API"; the upstream's own words go to the log, key-like strings masked.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import math
import re
import time
from typing import Any

import httpx

from san_jobs.ai_gateway.backends.secrets import SecretMasker
from san_jobs.ai_gateway.errors import (
    MAX_RETRY_DELAY,
    BackendUnavailable,
    DeadlineExceeded,
    MalformedResponse,
    RateLimited,
    TokenLimitExceeded,
    json_error_message,
)
from san_jobs.ai_gateway.kinds.analyze import AnalyzeInput, AnalyzeResult
from san_jobs.ai_gateway.kinds.embed import EmbedInput, EmbedResult
from san_jobs.ai_gateway.kinds.recall import RecallInput, RecallQuestion, RecallResult
from san_jobs.ai_gateway.kinds.til import TilInput, TilResult
from san_jobs.ai_gateway.model_tokens import estimate_tokens_all
from san_jobs.ai_gateway.usage import Usage

logger = logging.getLogger("ai_gateway.backends.openai")

# Used when the caller sets no deadline: never wait on the network forever.
DEFAULT_TIMEOUT = 60.0
# A Retry-After that is missing or not a number of seconds or a date (negative, NaN,
# garbage) means this wait; any other is clamped to 0..MAX_RETRY_DELAY.
DEFAULT_RETRY_AFTER = 1.0
# The most of an upstream answer the gateway reads: a chat or embedding answer is a
# few KiB to a few hundred; an endless or huge body must not fill the gateway's memory.
MAX_UPSTREAM_BODY_BYTES = 8 * 1024 * 1024
# What the log keeps of an upstream's error message; it is masked over a little more,
# so that a key-like string across the cut is recognised whole.
MAX_DETAIL_CHARS = 300
_KEY_LIKE_MARGIN = 256
# Numbers read from an upstream message (a context length) above this are not believed.
_MAX_UPSTREAM_NUMBER = 10**9

_ANALYZE_PROMPT = (
    "You analyse a text. Answer with one JSON object and nothing else: "
    '{"summary": string (at most 3 sentences, in the language of the text), '
    '"tags": array of 3 to 8 short keyword strings}.'
)
_TIL_PROMPT = (
    "You write a 'today I learned' note from one day's notes. Group related notes, merge "
    'repeats. Answer with one JSON object and nothing else: {"title": string, '
    '"body": string (Markdown)}.'
)
_RECALL_PROMPT = (
    "You write recall questions grounded in the numbered sources; a source's key terms, "
    "when given, are what its questions should ask about first. Answer with one JSON "
    'object and nothing else: {"questions": [{"question": string, "answer": string, '
    '"source_index": integer (the number of the source used)}]}.'
)


class OpenAIBackend:
    """Talks to an OpenAI-compatible API with one pooled ``httpx.AsyncClient``."""

    name = "openai"

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        chat_model: str,
        embedding_model: str,
        max_input_tokens: int,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._mask = SecretMasker([api_key])
        self._client = httpx.AsyncClient(base_url=base_url.rstrip("/") + "/", headers=headers)
        self.chat_model = chat_model
        self.embedding_model = embedding_model
        self.max_input_tokens = max_input_tokens

    async def analyze(self, request: AnalyzeInput, time_left: float | None) -> AnalyzeResult:
        """Summary and tags from the chat model, embedding from the embedding model."""
        deadline = _deadline(time_left)
        context = f"Title: {request.title}\nURL: {request.url}\n\n" if request.title else ""
        answer, chat_spent = await self._chat(_ANALYZE_PROMPT, context + request.text, deadline)
        summary = _field(answer, "summary", str)
        tags = _field(answer, "tags", list)
        if not all(isinstance(t, str) for t in tags):
            raise MalformedResponse("unexpected answer: 'tags' must be a list of strings")
        embedding, embed_spent = await self._embed(
            f"{request.title}\n{request.text}".strip(), deadline
        )
        usage = _usage(self.chat_model, chat_spent, embed_spent)
        return AnalyzeResult(summary, [str(t) for t in tags], embedding, self.chat_model, usage)

    async def generate_til(self, request: TilInput, time_left: float | None) -> TilResult:
        """A TIL note written by the chat model."""
        notes = "\n".join(f"- {n}" for n in request.notes)
        answer, spent = await self._chat(
            _TIL_PROMPT, f"Day: {request.day}\nNotes:\n{notes}", _deadline(time_left)
        )
        title, body = _field(answer, "title", str), _field(answer, "body", str)
        return TilResult(title, body, self.chat_model, _usage(self.chat_model, spent))

    async def generate_recall(self, request: RecallInput, time_left: float | None) -> RecallResult:
        """Questions written by the chat model; each must name a real source."""
        sources = "\n\n".join(
            f"Source {i}: {s.title}\n"
            + (f"Key terms: {', '.join(s.key_terms)}\n" if s.key_terms else "")
            + s.text
            for i, s in enumerate(request.sources)
        )
        prompt = f"Write {request.question_count} questions.\n\n{sources}"
        answer, spent = await self._chat(_RECALL_PROMPT, prompt, _deadline(time_left))
        questions: list[RecallQuestion] = []
        for item in _field(answer, "questions", list)[: request.question_count]:
            if not isinstance(item, dict):
                raise MalformedResponse("unexpected answer: each question must be an object")
            index = _field(item, "source_index", int)
            if not 0 <= index < len(request.sources):
                raise MalformedResponse(f"unexpected answer: source_index {index} out of range")
            questions.append(
                RecallQuestion(_field(item, "question", str), _field(item, "answer", str), index)
            )
        return RecallResult(questions, self.chat_model, _usage(self.chat_model, spent))

    async def embed(self, request: EmbedInput, time_left: float | None) -> EmbedResult:
        """The embedding model's vector of the text (/v1/embeddings)."""
        vector, spent = await self._embed(request.text, _deadline(time_left))
        return EmbedResult(vector, self.embedding_model, _usage(self.embedding_model, spent))

    async def aclose(self) -> None:
        """Close pooled connections."""
        await self._client.aclose()

    async def _chat(
        self, system: str, user: str, deadline: float
    ) -> tuple[dict[str, Any], _Spent | None]:
        payload = {
            "model": self.chat_model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "response_format": {"type": "json_object"},
            "temperature": 0,
        }
        body = await self._post("chat/completions", payload, deadline, [system, user])
        try:
            content = body["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as err:
            raise MalformedResponse(
                f"unexpected response shape: no choices[0].message.content ({type(err).__name__})"
            ) from err
        if not isinstance(content, str):
            raise MalformedResponse("unexpected response shape: message content is not text")
        return _parse_object(content), _spent(body)

    async def _embed(self, text: str, deadline: float) -> tuple[list[float], _Spent | None]:
        body = await self._post(
            "embeddings", {"model": self.embedding_model, "input": text}, deadline, [text]
        )
        try:
            vector = [float(x) for x in body["data"][0]["embedding"]]
        except (KeyError, IndexError, TypeError, ValueError) as err:
            # Not the exception's words: they may quote the upstream's values.
            raise MalformedResponse(
                f"unexpected response shape: no data[0].embedding ({type(err).__name__})"
            ) from err
        norm = math.sqrt(sum(x * x for x in vector))
        if not vector or norm == 0 or not math.isfinite(norm):
            raise MalformedResponse("unexpected answer: empty or zero embedding")
        # The contract promises unit length whatever the upstream model returns.
        return [x / norm for x in vector], _spent(body)

    async def _post(
        self, path: str, payload: dict[str, Any], deadline: float, texts: list[str]
    ) -> dict[str, Any]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise DeadlineExceeded("deadline passed before the upstream call")
        try:
            # httpx's timeout is per phase (connect, each read, ...); asyncio.timeout bounds
            # the whole exchange, so a server that trickles bytes cannot outlive the caller.
            async with asyncio.timeout(remaining):
                response = await self._post_capped(path, payload, remaining)
        except (httpx.TimeoutException, TimeoutError) as err:
            raise DeadlineExceeded(
                f"upstream model did not answer within {remaining:.3f} s"
            ) from err
        except httpx.TransportError as err:
            # The exception's words may hold the upstream's address or data: log them.
            logger.warning("upstream %s: %s: %s", path, type(err).__name__, self._mask(str(err)))
            raise BackendUnavailable(f"backend unavailable: {type(err).__name__}") from err
        self._raise_for_status(response, texts)
        try:
            body = json.loads(response.text)
        except json.JSONDecodeError as err:
            raise MalformedResponse(json_error_message(err)) from err
        if not isinstance(body, dict):
            raise MalformedResponse("unexpected response shape: body is not a JSON object")
        return body

    async def _post_capped(
        self, path: str, payload: dict[str, Any], remaining: float
    ) -> httpx.Response:
        """POST, reading at most MAX_UPSTREAM_BODY_BYTES of the answer (its status and
        headers are kept; a longer body is a malformed answer, never read whole)."""
        request = self._client.build_request(
            "POST", path, json=payload, timeout=httpx.Timeout(remaining)
        )
        response = await self._client.send(request, stream=True)
        try:
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > MAX_UPSTREAM_BODY_BYTES:
                raise _body_too_large(response.status_code)
            chunks: list[bytes] = []
            size = 0
            # Decoded bytes: a small compressed body may unpack to gigabytes.
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > MAX_UPSTREAM_BODY_BYTES:
                    raise _body_too_large(response.status_code)
                chunks.append(chunk)
        finally:
            await response.aclose()
        headers = httpx.Headers(response.headers)
        for decoded_away in ("content-encoding", "content-length", "transfer-encoding"):
            headers.pop(decoded_away, None)
        return httpx.Response(
            response.status_code, headers=headers, content=b"".join(chunks), request=request
        )

    def _raise_for_status(self, response: httpx.Response, texts: list[str]) -> None:
        status = response.status_code
        if status < 400:
            return
        # The upstream's words are for the operator (masked), never for the caller.
        detail = _error_detail(response, self._mask)
        logger.warning(
            "upstream %s answered HTTP %d: %s", response.request.url.path, status, detail
        )
        said = f"HTTP {status} from the upstream API"
        if status == 429:
            raise RateLimited(
                f"upstream rate limit exceeded: {said}",
                retry_delay=parse_retry_after(response.headers.get("retry-after")),
                subject="backend",
                description="upstream model rate limit",
                metadata={"limit": "upstream"},
            )
        if status == 400 and _error_code(response) == "context_length_exceeded":
            tokens, limit = _context_numbers(detail)
            raise TokenLimitExceeded(
                tokens or estimate_tokens_all(texts), limit or self.max_input_tokens
            )
        if status >= 500:
            raise BackendUnavailable(f"backend unavailable: {said}")
        # 401/403/404 and the like: the gateway is misconfigured; retrying after the
        # operator fixes it can succeed, so this is "unavailable", not the caller's fault.
        raise BackendUnavailable(f"backend rejected the request: {said}")


# (input tokens, output tokens) as the provider counted them.
_Spent = tuple[int, int]


def _spent(body: dict[str, Any]) -> _Spent | None:
    """The provider's own count from the answer's `usage` (`prompt_tokens`, and
    `completion_tokens` for a chat; an embedding has none), or None when it gives none
    or gives numbers not worth believing (the gateway then counts itself)."""
    usage = body.get("usage")
    if not isinstance(usage, dict):
        return None
    counts: list[int] = []
    for value in (usage.get("prompt_tokens"), usage.get("completion_tokens", 0)):
        if isinstance(value, bool) or not isinstance(value, int):
            return None
        if not 0 <= value <= _MAX_UPSTREAM_NUMBER:
            return None
        counts.append(value)
    return counts[0], counts[1]


def _usage(model: str, *spent: _Spent | None) -> Usage | None:
    """The provider's count for a call made of `spent` requests (an analysis is a chat
    and an embedding); None unless the provider counted every one of them."""
    if any(s is None for s in spent):
        return None
    counted = [s for s in spent if s is not None]
    return Usage(
        model=model,
        input_tokens=sum(s[0] for s in counted),
        output_tokens=sum(s[1] for s in counted),
        duration_seconds=0.0,  # the gateway measures the whole call (calls.py)
    )


def _body_too_large(status: int) -> MalformedResponse:
    logger.warning(
        "upstream answered HTTP %d with a body over %d bytes", status, MAX_UPSTREAM_BODY_BYTES
    )
    return MalformedResponse(
        f"the upstream answer is larger than {MAX_UPSTREAM_BODY_BYTES:,} bytes (HTTP {status})"
    )


def parse_retry_after(value: str | None) -> float:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP date).

    Always finite, from 0 to MAX_RETRY_DELAY: a huge or infinite value is clamped; a
    negative, NaN or unreadable one means DEFAULT_RETRY_AFTER.
    """
    if not value:
        return DEFAULT_RETRY_AFTER
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if math.isnan(seconds) or seconds < 0:
            return DEFAULT_RETRY_AFTER
        return min(seconds, MAX_RETRY_DELAY)
    try:
        when = email.utils.parsedate_to_datetime(value)
        seconds = when.timestamp() - time.time()
    except (TypeError, ValueError, OverflowError, IndexError):
        return DEFAULT_RETRY_AFTER
    return min(max(0.0, seconds), MAX_RETRY_DELAY)


def _deadline(time_left: float | None) -> float:
    return time.monotonic() + (DEFAULT_TIMEOUT if time_left is None else time_left)


def _parse_object(content: str) -> dict[str, Any]:
    try:
        value = json.loads(content)
    except json.JSONDecodeError as err:
        raise MalformedResponse(json_error_message(err)) from err
    if not isinstance(value, dict):
        raise MalformedResponse("unexpected answer: not a JSON object")
    return value


def _field(obj: dict[str, Any], name: str, kind: type[Any]) -> Any:
    value = obj.get(name)
    # bool is an int subclass; a "source_index": true is still malformed.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise MalformedResponse(f"unexpected answer: field {name!r} missing or not {kind.__name__}")
    return value


def _error_json(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) else {}


def _error_code(response: httpx.Response) -> str:
    return str(_error_json(response).get("code") or "")


def _error_detail(response: httpx.Response, mask: SecretMasker) -> str:
    """The upstream's error message, masked, on one line of at most MAX_DETAIL_CHARS."""
    message = _error_json(response).get("message")
    text = " ".join((str(message) if message else response.text).split())
    # Masked before it is cut: a key cut in two would leave its first part unmasked.
    window = text[: MAX_DETAIL_CHARS + mask.longest + _KEY_LIKE_MARGIN]
    return mask(window)[:MAX_DETAIL_CHARS] or response.reason_phrase


def _context_numbers(message: str) -> tuple[int | None, int | None]:
    """(tokens sent, model limit) from an OpenAI-style context-length message, if present."""
    limit = re.search(r"maximum context length is (\d+)", message)
    sent = re.search(r"(?:resulted in|requested) (\d+) tokens", message)
    return _believable(sent), _believable(limit)


def _believable(found: re.Match[str] | None) -> int | None:
    """The number matched, unless absent or too big to be a real token count."""
    if found is None or len(found.group(1)) > 10:
        return None
    number = int(found.group(1))
    return number if 0 < number <= _MAX_UPSTREAM_NUMBER else None
