"""The one shape of every san-web error answer: ``{"error": {"code", "message", ...}}``.

Answers made inside the app use :func:`error_response`; answers written straight to the
socket by the HTTP protocol (before any request exists, or when one never completes) use
:func:`raw_error_response`, so a client sees the same JSON whichever layer refused it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from starlette.responses import JSONResponse


def error_document(code: str, message: str, **extra: Any) -> dict[str, Any]:
    """``{"error": {"code": code, "message": message, **extra}}``."""
    return {"error": {"code": code, "message": message, **extra}}


def error_response(
    status: int, code: str, message: str, *, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """A JSON error answer from inside the app."""
    return JSONResponse(error_document(code, message), status_code=status, headers=headers)


def raw_error_response(
    status: int, code: str, message: str, *, headers: Mapping[str, str] | None = None
) -> bytes:
    """A whole HTTP/1.1 error answer as bytes, ending the connection (``connection:
    close``): for the protocol layer, which has no request to answer through."""
    body = json.dumps(error_document(code, message)).encode()
    extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        f"{extra}"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def invalid(message: str, *violations: tuple[str, str]) -> JSONResponse:
    """422 INVALID_ARGUMENT naming each bad field: (field, description) pairs."""
    body = {
        "code": "INVALID_ARGUMENT",
        "message": message,
        "fieldViolations": [{"field": f, "description": d} for f, d in violations],
    }
    return JSONResponse({"error": body}, status_code=422)


def bad_parameter(parameter: str, description: str) -> JSONResponse:
    """400 INVALID_ARGUMENT naming the query parameter (GET /api/scraps, /api/days)."""
    body = error_document(
        "INVALID_ARGUMENT",
        f"invalid {parameter}",
        fieldViolations=[{"field": parameter, "description": description}],
    )
    return JSONResponse(body, status_code=400)
