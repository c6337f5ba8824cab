"""Who is calling san-web, checked once for every request (:class:`SessionGuard`).

With ``--auth password`` a request needs a live session (the ``san_session`` cookie set
by ``POST /api/session``): without one, the API answers 401 and a page redirects to
``/login``. Every state-changing request (anything but GET, HEAD, OPTIONS) must also
carry the session's CSRF token in ``X-CSRF-Token`` (403 otherwise): another site's
page can make the browser send the cookie, but it cannot read the token.

In both modes a state-changing request whose ``Origin`` header names another origin is
refused (403): browsers send it on every cross-site write.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Literal

from starlette.datastructures import Headers
from starlette.requests import HTTPConnection
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from san_jobs.web._errors import error_response
from san_jobs.web._store import ScrapStore, WebSession

AuthMode = Literal["off", "password"]
SESSION_COOKIE = "san_session"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
DEFAULT_SESSION_SECONDS = 12 * 3600
LOGIN_PAGE = "/login"
# Pages a login goes back to (`/login?next=/ops`): a fixed list, so the parameter can
# never send a user off the site (the login page's script holds the same list).
RETURN_PAGES = ("/", "/ops")


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """How san-web knows its users: ``mode`` off (loopback default: one shared space,
    no login) or password; ``secure_cookie`` when served over TLS."""

    mode: AuthMode = "off"
    secure_cookie: bool = False
    session_seconds: int = DEFAULT_SESSION_SECONDS


def token_hash(token: str) -> str:
    """What the sessions table keys a session by: the SHA-256 of its cookie value (a
    random 256-bit token, so no salt or slow hash is needed)."""
    return hashlib.sha256(token.encode()).hexdigest()


def tokens_match(given: str | None, expected: str) -> bool:
    """Whether a CSRF token sent by the client is the session's, compared in constant
    time (:func:`hmac.compare_digest`)."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def same_origin(scope: Scope, origin: str) -> bool:
    """Whether an ``Origin`` header value is this server's own origin, as the client
    reached it (scheme and the ``Host`` it sent, which :class:`AllowedHosts` checked)."""
    host = Headers(scope=scope).get("host", "")
    return bool(host) and origin.lower() == f"{scope['scheme']}://{host}".lower()


def _is_public(method: str, path: str) -> bool:
    """What anyone may reach: the login page and its files, the health check, and the
    login call itself."""
    if path in (LOGIN_PAGE, "/healthz") or path.startswith("/static/"):
        return True
    return path == "/api/session" and method == "POST"


def current_user(connection: HTTPConnection) -> str | None:
    """The logged-in user of this request; None with ``--auth off``."""
    user: str | None = connection.state.user
    return user


def current_session(connection: HTTPConnection) -> tuple[str, WebSession] | None:
    """The (token hash, session) of this request, if it has a live session."""
    found: tuple[str, WebSession] | None = connection.state.session
    return found


class SessionGuard:
    """ASGI middleware: the Origin check, the session and the CSRF token."""

    def __init__(self, app: ASGIApp, *, settings: AuthSettings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        state["user"], state["session"] = None, None
        method, path = scope["method"], scope["path"]
        writes = method not in SAFE_METHODS
        origin = Headers(scope=scope).get("origin")
        if writes and origin is not None and not same_origin(scope, origin):
            await self._refuse(scope, receive, send, "CROSS_ORIGIN", "cross-origin request")
            return
        if self.settings.mode == "off":
            await self.app(scope, receive, send)
            return
        found = await self._session(scope)
        if found is not None:
            state["user"], state["session"] = found[1].username, found
        if _is_public(method, path):
            await self.app(scope, receive, send)
            return
        if found is None:
            response: Response
            if path.startswith("/api/"):
                response = error_response(401, "UNAUTHENTICATED", "log in first")
            else:
                target = f"{LOGIN_PAGE}?next={path}" if path in RETURN_PAGES[1:] else LOGIN_PAGE
                response = RedirectResponse(target, status_code=303)
            await response(scope, receive, send)
            return
        if writes and not tokens_match(Headers(scope=scope).get(CSRF_HEADER), found[1].csrf_token):
            await self._refuse(
                scope, receive, send, "CSRF_TOKEN_MISSING", "missing or wrong X-CSRF-Token"
            )
            return
        await self.app(scope, receive, send)

    async def _session(self, scope: Scope) -> tuple[str, WebSession] | None:
        token = HTTPConnection(scope).cookies.get(SESSION_COOKIE)
        if not token or len(token) > 128:
            return None
        store: ScrapStore = scope["app"].state.store
        hashed = token_hash(token)
        session = await store.get_session(hashed)
        return None if session is None else (hashed, session)

    @staticmethod
    async def _refuse(scope: Scope, receive: Receive, send: Send, code: str, why: str) -> None:
        await error_response(403, code, why)(scope, receive, send)
