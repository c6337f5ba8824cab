"""san-web's command line: ``san-web --listen HOST:PORT --job-service HOST:PORT
--database-url URL`` and the limits on what one client may hold (body size, open
connections, time to send a request); each flag has a ``SAN_WEB_*`` environment
variable."""

from __future__ import annotations

import contextlib
import socket
import sys
from collections.abc import Iterator, Sequence
from typing import NoReturn

import uvicorn

from san_jobs.shared.cli_settings import SettingsParser, settings_of
from san_jobs.web import _https
from san_jobs.web._auth_cli import auth_options, resolve_auth_mode
from san_jobs.web._client_address import TrustedProxies, parse_networks
from san_jobs.web._days import DaySettings, parse_til_at
from san_jobs.web._job_service_link import LinkSettingsError, load_link
from san_jobs.web._logging import safe_log_config
from san_jobs.web._protocol import guarded_h11_protocol
from san_jobs.web._settings import DEFAULT_DATABASE_URL, WebSettings
from san_jobs.web.app import REQUESTED_BY, OutboxSettings, create_app


def _split(address: str) -> tuple[str, int]:
    """Host and port of a HOST:PORT the settings have checked (IPv6 without brackets)."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def build_parser() -> SettingsParser:
    """One flag per `WebSettings` field, each with its SAN_WEB_* variable."""
    return SettingsParser(
        prog="san-web",
        description="The san web backend and its live job page.",
        settings=WebSettings,
    )


class _Server(uvicorn.Server):
    """uvicorn, announcing the real address once the app has started."""

    def __init__(
        self, config: uvicorn.Config, sock: socket.socket, tls: _https.ServerTls | None
    ) -> None:
        super().__init__(config)
        self._sock = sock
        self._tls = tls
        self._scheme = "https" if tls is not None else "http"

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """uvicorn re-raises SIGTERM/SIGINT after its graceful shutdown, so the
        process dies "by signal"; a clean stop on request is a normal exit (0),
        like the other two services."""
        with super().capture_signals():
            yield
            self._captured_signals.clear()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if not self.should_exit:
            host, port = self._sock.getsockname()[:2]
            shown = f"[{host}]" if ":" in host else host
            _https.reload_on_sighup(self._tls)
            print(f"san-web listening on {self._scheme}://{shown}:{port}", flush=True)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["users"]:
        from san_jobs.web._users_cli import users_main

        sys.exit(users_main(argv[1:], default_database_url=DEFAULT_DATABASE_URL))
    args = build_parser().parse_args(argv)
    settings = settings_of(args, WebSettings)
    host, port = _split(settings.listen)
    args.auth = resolve_auth_mode(settings.auth, settings.listen)
    try:
        tls = _https.server_tls(args, authenticated=args.auth == "password")
        link = load_link(
            target=settings.job_service,
            tls_ca=settings.job_service_tls_ca,
            tls_cert=settings.job_service_tls_cert,
            tls_key=settings.job_service_tls_key,
            token_file=settings.job_service_token_file,
        )
    except (_https.HttpsSettingsError, LinkSettingsError) as error:
        sys.stderr.write(f"san-web: error: {error}\n")
        sys.exit(2)
    for warning in link.warnings:
        sys.stderr.write(f"san-web: warning: {warning}\n")
    # Binding here, not in uvicorn, lets --listen HOST:0 report the port it really got.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sys.stderr.write(f"san-web: error: cannot listen on {settings.listen}: {error.strerror}\n")
        sys.exit(1)
    app = create_app(
        job_service=settings.job_service,
        database_url=settings.database_url,
        max_body_bytes=settings.max_body_bytes,
        body_timeout=settings.body_timeout,
        client_factory=link.client_factory(timeout=settings.job_service_timeout),
        # Without a token or a client certificate JobService records the requested_by
        # san-web sends; with one it records the credential's name, unknown here.
        job_service_identity=(
            REQUESTED_BY if link.token is None and link.tls_cert is None else None
        ),
        outbox_settings=OutboxSettings(
            poll_interval=settings.outbox_poll_interval,
            max_backoff=settings.outbox_max_backoff,
            lease=2 * settings.job_service_timeout,
        ),
        day_settings=DaySettings(
            til_at=parse_til_at(settings.til_at),
            default_zone=settings.time_zone,
            check_interval=settings.day_check_interval,
            shared_space=args.auth == "off",
        ),
        **auth_options(args, host, tls=tls is not None),
    )
    trusted_proxies = TrustedProxies(parse_networks(settings.trusted_proxies or ""))
    config = uvicorn.Config(
        app,
        log_level=settings.log_level,
        # One line per record, whatever a client sent; passwords masked.
        log_config=safe_log_config(settings.log_level),
        timeout_graceful_shutdown=3,
        lifespan="on",
        # Python's own loop, as the web extra installs it: san-web starts TLS itself
        # (below), which needs a transport that reads nothing while told to pause;
        # uvloop (the server extra's) starts reading after connection_made regardless.
        loop="asyncio",
        # uvicorn believes X-Forwarded-For from 127.0.0.1 unless told otherwise, so
        # anything on this machine (or a proxy no one named) could pick its client
        # address, and with it a fresh login count per guess: only named proxies.
        proxy_headers=bool(trusted_proxies),
        forwarded_allow_ips=trusted_proxies.uvicorn_list(),
        # uvicorn's own limit_concurrency would only refuse a connection once its
        # request head is complete, and under TLS uvicorn would see a connection only
        # after its handshake: the protocol below counts every connection from accept
        # and runs the handshake itself (so uvicorn is given no certificate).
        http=guarded_h11_protocol(
            max_connections=settings.max_connections,
            max_connections_per_address=settings.max_connections_per_address,
            header_timeout=settings.header_timeout,
            trusted_proxies=trusted_proxies,
            tls=None if tls is None else tls.context,
        ),
    )
    server = _Server(config, sock, tls)
    server.run(sockets=[sock])
    sys.exit(0 if server.started else 1)
