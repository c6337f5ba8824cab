"""Checks on the body of every API write, before and while a handler reads it.

Starlette reads a whole body into memory (``await request.json()``): a 40 MB POST grew
san-web to 248 MB. :class:`BodyGuard` answers, for writes (POST, PUT, PATCH, DELETE)
under ``/api/``:

- 415 when a write carries a body or a ``Content-Type`` that is not ``application/json``
  (a browser form can post ``text/plain`` or form data cross-site; it cannot post JSON);
- 413 at once when ``Content-Length`` is over the limit, before reading any of it;
- 413 as soon as a body without a length (chunked) passes the limit while it streams
  in, so no more than the limit is ever held;
- 408 when the body has not all arrived ``body_timeout`` seconds after the request
  head: a client trickling a body would otherwise hold its connection for ever.

Starlette 1.10 has ``Starlette(max_body_size=...)``, but it answers a too-large
``Content-Length`` with a plain-text 413 that replaces whatever the app sends (its send
wrapper), so san-web's errors would not all be JSON; the count here is the same idea.
The 413 and 408 are raised as ``HTTPException`` from ``receive``, so the app's JSON
handler answers them.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from san_jobs.web._errors import error_response, invalid

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
JSON_MEDIA_TYPE = "application/json"
# What ``await request.json()`` raises on a body it cannot read: ValueError covers
# malformed JSON and bad UTF-8 (JSONDecodeError, UnicodeDecodeError) and an integer of
# more than 4,300 digits (Python's limit on int() of a string, which was a 500);
# RecursionError is deep nesting. Each is the caller's 422, never a 500.
UNREADABLE_JSON = (ValueError, RecursionError)


class BodyGuard:
    """ASGI middleware checking the body of writes under ``/api/``."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, body_timeout: float) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout = body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] not in WRITE_METHODS
            or not scope["path"].startswith("/api/")
        ):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        content_type = headers.get("content-type")
        declared = headers.get("content-length")
        has_body = (declared is not None and declared != "0") or "transfer-encoding" in headers
        if (content_type is not None or has_body) and not is_json(content_type):
            response = error_response(
                415, "UNSUPPORTED_MEDIA_TYPE", f"the body must be {JSON_MEDIA_TYPE}"
            )
            await response(scope, receive, send)
            return
        # uvicorn's parser (h11) has already refused a Content-Length that is not a
        # plain decimal number, so int() cannot fail here.
        if declared is not None and int(declared) > self.max_body_bytes:
            # No "connection: close": closing a socket with unread data in it makes the
            # kernel reset the connection, which can destroy this answer before the
            # client reads it. uvicorn reads and drops the rest instead (constant
            # memory), and the protocol's read timeout ends a client that trickles it.
            response = error_response(413, *too_large(self.max_body_bytes))
            await response(scope, receive, send)
            return
        await self.app(scope, self._bounded(receive), send)

    def _bounded(self, receive: Receive) -> Receive:
        """``receive``, failing with 413 past ``max_body_bytes`` and with 408 while the
        body is still due after the deadline."""
        deadline = asyncio.get_running_loop().time() + self.body_timeout
        body_done = False
        received = 0

        async def receive_body() -> Message:
            nonlocal body_done, received
            if body_done:
                return await receive()  # only the disconnect is left: no deadline
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise HTTPException(
                    408,
                    f"the body did not arrive within {self.body_timeout:g} seconds",
                    headers={"connection": "close"},
                ) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise HTTPException(413)
            body_done = message["type"] != "http.request" or not message.get("more_body")
            return message

        return receive_body


def too_large(max_body_bytes: int) -> tuple[str, str]:
    """The code and message of a 413."""
    return "REQUEST_TOO_LARGE", f"the body must be at most {max_body_bytes} bytes"


def is_json(content_type: str | None) -> bool:
    """Whether a Content-Type header names JSON (parameters such as charset allowed)."""
    if content_type is None:
        return False
    return content_type.split(";", 1)[0].strip().lower() == JSON_MEDIA_TYPE


async def json_object(request: Request) -> dict[str, Any] | JSONResponse:
    """The request's body as a JSON object, or the 422 that says why it is not one."""
    try:
        body = await request.json()
    except UNREADABLE_JSON:
        return invalid("the body must be a JSON object", ("body", "is not valid JSON"))
    if not isinstance(body, dict):
        return invalid("the body must be a JSON object", ("body", "is not a JSON object"))
    return body
