"""``/api/session`` (log in, who am I, log out) and the login page.

``POST /api/session`` with ``{"username", "password"}`` answers 200 with
``{"username", "csrfToken"}`` and sets the session cookie (``HttpOnly``,
``SameSite=Lax``, ``Secure`` under TLS); a wrong name or password is 401 with the same
message either way; too many failures are 429 with ``Retry-After``.
``GET /api/session`` tells the page whether there is a login at all and, if so, the
CSRF token of its session. ``DELETE /api/session`` ends the session.
"""

from __future__ import annotations

import logging
import secrets
from datetime import UTC, datetime, timedelta
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response

from san_jobs.web._auth import (
    SESSION_COOKIE,
    AuthSettings,
    current_session,
    token_hash,
)
from san_jobs.web._body_guard import UNREADABLE_JSON
from san_jobs.web._errors import error_response, invalid
from san_jobs.web._login_throttle import LoginThrottle, Throttled
from san_jobs.web._passwords import MAX_PASSWORD_CHARS, PasswordChecker, username_problem
from san_jobs.web._store import ScrapStore

STATIC = Path(__file__).parent / "static"
WRONG_CREDENTIALS = "wrong user name or password"
NO_LOGIN = "this san-web has no login (--auth off)"

log = logging.getLogger("san_web")


def _settings(request: Request) -> AuthSettings:
    settings: AuthSettings = request.app.state.auth
    return settings


def _store(request: Request) -> ScrapStore:
    store: ScrapStore = request.app.state.store
    return store


async def login_page(request: Request) -> Response:
    if _settings(request).mode == "off":
        return RedirectResponse("/", status_code=303)
    return FileResponse(STATIC / "login.html")


async def _credentials(request: Request) -> tuple[str, str] | None:
    try:
        body = await request.json()
    except UNREADABLE_JSON:
        return None
    if not isinstance(body, dict):
        return None
    username, password = body.get("username"), body.get("password")
    if not isinstance(username, str) or not isinstance(password, str):
        return None
    if not username or len(username) > 64 or len(password) > MAX_PASSWORD_CHARS:
        return None
    return username, password


def _encodable(text: str) -> bool:
    """Whether `text` has a UTF-8 form (a lone surrogate has none)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


async def create_session(request: Request) -> Response:
    """Log in."""
    settings = _settings(request)
    if settings.mode == "off":
        return error_response(404, "NOT_FOUND", NO_LOGIN)
    credentials = await _credentials(request)
    if credentials is None:
        return error_response(
            422, "INVALID_ARGUMENT", 'the body must be {"username": "...", "password": "..."}'
        )
    username, password = credentials
    # A name no user can have (NUL, a lone surrogate, ...) never reaches the database.
    problem = username_problem(username)
    if problem is not None:
        return invalid("invalid login request", ("username", problem))
    if not password.isprintable() and not _encodable(password):
        return invalid("invalid login request", ("password", "must be valid Unicode text"))
    # The client's own address (a trusted proxy's X-Forwarded-For, if any, is applied).
    address = request.client.host if request.client else ""
    throttle: LoginThrottle = request.app.state.login_throttle
    # Counted before the password is checked: guesses sent at once are throttled too.
    attempt = throttle.reserve(username, address)
    if isinstance(attempt, Throttled):
        wait = attempt.retry_after
        return error_response(
            429,
            "RESOURCE_EXHAUSTED",
            f"too many failed logins; try again in {wait} s",
            headers={"Retry-After": str(wait)},
        )
    store = _store(request)
    checker: PasswordChecker = request.app.state.passwords
    valid, rehash = await checker.verify(await store.password_hash(username), password)
    if not valid:
        attempt.failed()
        log.warning("failed login for %r from %s", username, address)
        return error_response(401, "UNAUTHENTICATED", WRONG_CREDENTIALS)
    attempt.succeeded()
    if rehash is not None:
        await store.set_password_hash(username, rehash)
    old = current_session(request)
    if old is not None:
        await store.delete_session(old[0])
    token, csrf_token = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    expires = datetime.now(UTC) + timedelta(seconds=settings.session_seconds)
    await store.add_session(token_hash(token), username, csrf_token, expires)
    response = JSONResponse({"username": username, "csrfToken": csrf_token})
    response.set_cookie(
        SESSION_COOKIE,
        token,
        max_age=settings.session_seconds,
        path="/",
        httponly=True,
        samesite="lax",
        secure=settings.secure_cookie or request.url.scheme == "https",
    )
    return response


async def read_session(request: Request) -> Response:
    """Whether this san-web has logins, and this session's user and CSRF token."""
    if _settings(request).mode == "off":
        return JSONResponse({"auth": "off"})
    found = current_session(request)
    assert found is not None  # the guard answered 401 otherwise
    session = found[1]
    return JSONResponse(
        {"auth": "password", "username": session.username, "csrfToken": session.csrf_token}
    )


async def delete_session(request: Request) -> Response:
    """Log out: the session ends on the server, and the cookie is cleared."""
    if _settings(request).mode == "off":
        return error_response(404, "NOT_FOUND", NO_LOGIN)
    found = current_session(request)
    assert found is not None
    await _store(request).delete_session(found[0])
    response = JSONResponse({"loggedOut": True})
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="lax")
    return response
