"""san-web's command line: ``san-web --listen HOST:PORT --job-service HOST:PORT
--database-url URL`` and the limits on what one client may hold (body size, open
connections, time to send a request); each flag has a ``SAN_WEB_*`` environment
variable."""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
from collections.abc import Iterator, Sequence
from typing import NoReturn

import uvicorn

from clients.web import _https
from clients.web._auth_cli import add_auth_arguments, auth_options, resolve_auth_mode
from clients.web._job_service_link import LinkSettingsError, load_link
from clients.web._logging import safe_log_config
from clients.web._protocol import guarded_h11_protocol
from clients.web.app import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_MAX_BODY_BYTES,
    OutboxSettings,
    create_app,
)
from san_jobs.client._channel import DEFAULT_TIMEOUT

DEFAULT_LISTEN = "127.0.0.1:8000"
DEFAULT_JOB_SERVICE = "127.0.0.1:50051"
DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./var/san-web.db"
# Each open page holds one connection (its live event stream) for as long as it is open.
DEFAULT_MAX_CONNECTIONS = 100
DEFAULT_HEADER_TIMEOUT = 5.0
DEFAULT_OUTBOX = OutboxSettings()
DEFAULT_JOB_SERVICE_TIMEOUT = DEFAULT_TIMEOUT


def _split(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {address!r}")
    return host.strip("[]"), int(port)


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return int(text)


def _positive_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < 86_400:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"expected seconds above 0, got {text!r}")
    return seconds


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="san-web", description="The san web backend and its live job page."
    )
    env = os.environ.get
    parser.add_argument(
        "--listen", default=env("SAN_WEB_LISTEN") or DEFAULT_LISTEN, metavar="HOST:PORT",
        help=f"where to serve HTTP (default {DEFAULT_LISTEN}; port 0 picks a free one) "
        "[env SAN_WEB_LISTEN]",
    )  # fmt: skip
    parser.add_argument(
        "--job-service", default=env("SAN_WEB_JOB_SERVICE") or DEFAULT_JOB_SERVICE,
        metavar="HOST:PORT",
        help=f"JobService address (default {DEFAULT_JOB_SERVICE}) [env SAN_WEB_JOB_SERVICE]",
    )  # fmt: skip
    parser.add_argument(
        "--database-url", default=env("SAN_WEB_DATABASE_URL") or DEFAULT_DATABASE_URL,
        metavar="URL",
        help=f"SQLAlchemy async URL of san-web's own scraps table (default "
        f"{DEFAULT_DATABASE_URL}) [env SAN_WEB_DATABASE_URL]",
    )  # fmt: skip
    parser.add_argument(
        "--max-body-bytes", type=_positive_int,
        default=env("SAN_WEB_MAX_BODY_BYTES") or str(DEFAULT_MAX_BODY_BYTES), metavar="BYTES",
        help=f"largest request body; bigger ones get 413 (default {DEFAULT_MAX_BODY_BYTES}) "
        "[env SAN_WEB_MAX_BODY_BYTES]",
    )  # fmt: skip
    parser.add_argument(
        "--max-connections", type=_positive_int,
        default=env("SAN_WEB_MAX_CONNECTIONS") or str(DEFAULT_MAX_CONNECTIONS), metavar="N",
        help="open connections at most; one more is answered 503 and closed (default "
        f"{DEFAULT_MAX_CONNECTIONS}) [env SAN_WEB_MAX_CONNECTIONS]",
    )  # fmt: skip
    parser.add_argument(
        "--header-timeout", type=_positive_seconds,
        default=env("SAN_WEB_HEADER_TIMEOUT") or str(DEFAULT_HEADER_TIMEOUT), metavar="SECONDS",
        help="time a client has to send a whole request head, from connecting or from its "
        f"previous answer; then 408 and closed (default {DEFAULT_HEADER_TIMEOUT:g}) "
        "[env SAN_WEB_HEADER_TIMEOUT]",
    )  # fmt: skip
    parser.add_argument(
        "--body-timeout", type=_positive_seconds,
        default=env("SAN_WEB_BODY_TIMEOUT") or str(DEFAULT_BODY_TIMEOUT), metavar="SECONDS",
        help="time a client has to send a whole request body after its head; then 408 "
        f"(default {DEFAULT_BODY_TIMEOUT:g}) [env SAN_WEB_BODY_TIMEOUT]",
    )  # fmt: skip
    parser.add_argument(
        "--job-service-timeout", type=_positive_seconds,
        default=env("SAN_WEB_JOB_SERVICE_TIMEOUT") or str(DEFAULT_JOB_SERVICE_TIMEOUT),
        metavar="SECONDS",
        help="deadline of each call to JobService, the outbox's deliveries included "
        f"(default {DEFAULT_JOB_SERVICE_TIMEOUT:g}) [env SAN_WEB_JOB_SERVICE_TIMEOUT]",
    )  # fmt: skip
    parser.add_argument(
        "--outbox-poll-interval", type=_positive_seconds,
        default=env("SAN_WEB_OUTBOX_POLL_INTERVAL") or str(DEFAULT_OUTBOX.poll_interval),
        metavar="SECONDS",
        help="how often the outbox relay looks for scraps to hand to JobService when "
        f"nothing woke it (default {DEFAULT_OUTBOX.poll_interval:g}) "
        "[env SAN_WEB_OUTBOX_POLL_INTERVAL]",
    )  # fmt: skip
    parser.add_argument(
        "--outbox-max-backoff", type=_positive_seconds,
        default=env("SAN_WEB_OUTBOX_MAX_BACKOFF") or str(DEFAULT_OUTBOX.max_backoff),
        metavar="SECONDS",
        help="longest wait between two hand-off attempts while JobService is unreachable "
        f"(default {DEFAULT_OUTBOX.max_backoff:g}) [env SAN_WEB_OUTBOX_MAX_BACKOFF]",
    )  # fmt: skip
    parser.add_argument(
        "--log-level", default=env("SAN_WEB_LOG_LEVEL") or "warning",
        help="uvicorn log level (default warning) [env SAN_WEB_LOG_LEVEL]",
    )  # fmt: skip
    _https.add_arguments(parser)
    add_auth_arguments(parser)
    return parser


class _Server(uvicorn.Server):
    """uvicorn, announcing the real address once the app has started."""

    def __init__(self, config: uvicorn.Config, sock: socket.socket) -> None:
        super().__init__(config)
        self._sock = sock
        self._scheme = "https" if config.ssl_certfile else "http"

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
            _https.reload_on_sighup(self.config)
            print(f"san-web listening on {self._scheme}://{shown}:{port}", flush=True)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["users"]:
        from clients.web._users_cli import users_main

        sys.exit(users_main(argv[1:], default_database_url=DEFAULT_DATABASE_URL))
    args = build_parser().parse_args(argv)
    try:
        host, port = _split(args.listen)
    except argparse.ArgumentTypeError as error:
        sys.stderr.write(f"san-web: error: --listen: {error}\n")
        sys.exit(2)
    args.auth = resolve_auth_mode(args.auth, args.listen)
    try:
        ssl_options = _https.ssl_options(args, authenticated=args.auth == "password")
        link = load_link(
            tls_ca=args.job_service_tls_ca,
            tls_cert=args.job_service_tls_cert,
            tls_key=args.job_service_tls_key,
            token_file=args.job_service_token_file,
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
        sys.stderr.write(f"san-web: error: cannot listen on {args.listen}: {error.strerror}\n")
        sys.exit(1)
    app = create_app(
        job_service=args.job_service,
        database_url=args.database_url,
        max_body_bytes=args.max_body_bytes,
        body_timeout=args.body_timeout,
        client_factory=link.client_factory(timeout=args.job_service_timeout),
        outbox_settings=OutboxSettings(
            poll_interval=args.outbox_poll_interval,
            max_backoff=args.outbox_max_backoff,
            lease=2 * args.job_service_timeout,
        ),
        **auth_options(args, host, tls=bool(ssl_options)),
    )
    config = uvicorn.Config(
        app,
        **ssl_options,
        log_level=args.log_level,
        # One line per record, whatever a client sent; passwords masked.
        log_config=safe_log_config(args.log_level),
        timeout_graceful_shutdown=3,
        lifespan="on",
        # uvicorn's own limit_concurrency would only refuse a connection once its
        # request head is complete: the protocol below counts every open connection.
        http=guarded_h11_protocol(
            max_connections=args.max_connections, header_timeout=args.header_timeout
        ),
    )
    server = _Server(config, sock)
    server.run(sockets=[sock])
    sys.exit(0 if server.started else 1)
