"""What every san-web answer says to the browser about itself, and which Host names it
answers to at all.

- :class:`SecurityHeaders` adds, to every answer that has not set its own:
  ``Content-Security-Policy`` (scripts, styles and connections from san-web's own
  origin only: no inline script can run, so injected markup stays inert; no framing),
  ``X-Content-Type-Options: nosniff``, ``X-Frame-Options: DENY`` (older browsers'
  spelling of ``frame-ancestors 'none'``) and ``Referrer-Policy: same-origin``; and
  over HTTPS ``Strict-Transport-Security`` (a year; no ``includeSubDomains``: san-web
  does not own its domain's other names), so a browser that has been here once never
  tries plain HTTP to it again. Not for ``localhost``: browsers would pin every port
  of this machine's localhost to HTTPS, the plain http://localhost:8000 of a local
  san-web included (for an IP address browsers ignore it anyway).
- :class:`AllowedHosts` answers 421 (JSON) to a request whose ``Host`` is not in the
  allow-list: a page on another name that the attacker points at this machine's address
  (DNS rebinding) reaches nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from san_jobs.web._errors import error_response

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
}
STRICT_TRANSPORT_SECURITY = "max-age=31536000"


def wants_hsts(scope: Scope) -> bool:
    """Whether this answer carries ``Strict-Transport-Security``: it came over HTTPS
    (the connection's own, or a trusted proxy's X-Forwarded-Proto) to a name that is
    not localhost."""
    if scope.get("scheme") != "https":
        return False
    name = host_name(Headers(scope=scope).get("host", ""))
    return name != "localhost" and not name.endswith(".localhost")


class SecurityHeaders:
    """ASGI middleware adding :data:`SECURITY_HEADERS` to every HTTP answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        hsts = wants_hsts(scope)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
                if hsts:
                    headers.setdefault("strict-transport-security", STRICT_TRANSPORT_SECURITY)
            await send(message)

        await self.app(scope, receive, send_with_headers)


def host_name(host_header: str) -> str:
    """The name in a ``Host`` header value, lower case, without port or IPv6 brackets."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    name, _, port = host.rpartition(":")
    return name if name and port.isdigit() else host


def default_allowed_hosts(listen_host: str) -> list[str]:
    """The listen address and the names of this machine's loopback."""
    names = [listen_host.strip("[]").lower()]
    for loopback in ("localhost", "127.0.0.1", "::1"):
        if loopback not in names:
            names.append(loopback)
    return [name for name in names if name]


class AllowedHosts:
    """ASGI middleware refusing a ``Host`` outside ``allowed`` (``*`` allows any;
    ``*.example.com`` any name under example.com)."""

    def __init__(self, app: ASGIApp, *, allowed: Iterable[str]) -> None:
        self.app = app
        self.allowed = frozenset(name.strip().lower() for name in allowed if name.strip())
        self.suffixes = tuple(name[1:] for name in self.allowed if name.startswith("*."))

    def allows(self, host_header: str | None) -> bool:
        if "*" in self.allowed:
            return True
        if not host_header:
            return False
        name = host_name(host_header)
        return name in self.allowed or (bool(self.suffixes) and name.endswith(self.suffixes))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.allows(Headers(scope=scope).get("host")):
            await self.app(scope, receive, send)
            return
        response = error_response(
            421, "MISDIRECTED_REQUEST", "this server does not answer to that Host name"
        )
        await response(scope, receive, send)
