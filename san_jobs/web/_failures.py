"""What san-web answers when something other than JobService goes wrong: Starlette's
own HTTP errors, its own database being away, and any exception nobody expected.

Every answer has the JSON shape of :mod:`san_jobs.web._errors` and a fixed message; the
details (driver messages hold database names, hosts, SQL) go to the log only.
"""

from __future__ import annotations

import logging
import uuid
from http import HTTPStatus

import sqlalchemy.exc as sa_exc
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from san_jobs.web._body_guard import too_large
from san_jobs.web._errors import error_response

log = logging.getLogger("san_web")

DATABASE_UNAVAILABLE = "san-web's database is unavailable; try again later"

# SQLSTATE classes that mean "the database is not there", not "this data is wrong":
# connection exception, insufficient resources, operator intervention (shutdown,
# restart), invalid catalog name (the database is gone).
_UNAVAILABLE_SQLSTATE_CLASSES = frozenset({"08", "53", "57", "3D"})


def is_database_unavailable(error: BaseException) -> bool:
    """Whether ``error`` from the scraps store means the database is down or unreachable
    (503, retry later) rather than a bug (500)."""
    if isinstance(error, OSError | sa_exc.TimeoutError):
        return True  # refused or lost connection; pool exhausted
    if not isinstance(error, sa_exc.DBAPIError):
        return False
    if error.connection_invalidated or isinstance(
        error, sa_exc.OperationalError | sa_exc.InterfaceError
    ):
        return True
    sqlstate = getattr(error.orig, "sqlstate", None)
    return isinstance(sqlstate, str) and sqlstate[:2] in _UNAVAILABLE_SQLSTATE_CLASSES


async def on_http_error(request: Request, error: Exception) -> Response:
    """Starlette's 404, 405, 413 and the guard's 408, as JSON."""
    assert isinstance(error, HTTPException)
    if error.status_code == 413:
        code, message = too_large(request.app.state.max_body_bytes)
    else:
        status = HTTPStatus(error.status_code)
        code, message = status.name, error.detail or status.phrase
    return error_response(error.status_code, code, message, headers=error.headers)


async def on_store_error(request: Request, error: Exception) -> Response:
    """A database error from the scraps store: 503 if the database is away, else 500."""
    if is_database_unavailable(error):
        log.warning(
            "san-web's database is unavailable (%s %s): %s: %r",
            request.method,
            request.url.path,
            type(error).__name__,
            str(error),
        )
        return error_response(503, "UNAVAILABLE", DATABASE_UNAVAILABLE)
    return await on_unexpected_error(request, error)


async def on_unexpected_error(request: Request, error: Exception) -> Response:
    """500 with an id to quote; the details are in the log line holding that id."""
    incident = uuid.uuid4().hex[:12]
    log.error(
        "internal error %s (%s %s)",
        incident,
        request.method,
        request.url.path,
        exc_info=error,
    )
    return error_response(500, "INTERNAL", f"internal error (id {incident})")
