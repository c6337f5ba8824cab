"""Channel settings shared by the sync and asyncio clients, and their constructor,
set in one place."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import grpc

SERVICE_NAME = "san.jobs.v1.JobService"

# Only UNAVAILABLE is retried: it means the call did not reach a server (or the server
# was going away), so sending it again is safe. Enqueue is made idempotent for these
# retries by the request_id the client always sends. Other codes are answers, not
# transport failures, and go back to the caller.
RETRY_POLICY: dict[str, Any] = {
    "maxAttempts": 4,
    "initialBackoff": "0.1s",
    "maxBackoff": "1s",
    "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE"],
}

SERVICE_CONFIG: dict[str, Any] = {
    "methodConfig": [{"name": [{"service": SERVICE_NAME}], "retryPolicy": RETRY_POLICY}],
}

DEFAULT_TIMEOUT = 10.0
"""Default deadline of a unary call, in seconds."""

MAX_RECEIVE_MESSAGE_BYTES = 64 * 1024 * 1024
MAX_SEND_MESSAGE_BYTES = 16 * 1024 * 1024
MAX_RECONNECT_BACKOFF_MS = 2_000


ChannelT = TypeVar("ChannelT")

PemSource = bytes | str | os.PathLike[str]
"""A PEM value: its contents (``bytes``) or the path of the file holding it."""


def read_pem(source: PemSource | None, what: str) -> bytes | None:
    """The PEM contents of ``source`` (bytes as given; a path is read), or None.

    ``what`` names the value in the error raised when it is not PEM (``ValueError``);
    an unreadable file raises ``OSError`` as usual.
    """
    if source is None:
        return None
    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    # grpc only notices a bad PEM when it connects, with a message that names neither
    # the file nor the setting: say it here.
    if b"-----BEGIN " not in data:
        where = "" if isinstance(source, bytes) else f" ({os.fspath(source)})"
        raise ValueError(f"{what}{where} is not PEM (no '-----BEGIN' line)")
    return data


def _is_bearer_token(token: str) -> bool:
    """ "" means no token; otherwise one printable ASCII word (RFC 6750's b64token and
    every token our services issue fit)."""
    return token == "" or (token.isascii() and token.isprintable() and " " not in token)


@dataclass(frozen=True, slots=True)
class ChannelSettings:
    """How a client connects to JobService.

    ``tls`` uses TLS: the server's certificate is checked against
    ``root_certificates`` (PEM of the CA) when given, or the system roots. For mutual
    TLS, ``client_certificate`` and ``client_key`` (PEM) are presented to the server.
    ``token`` is sent as ``authorization: Bearer TOKEN`` on every call.
    ``timeout`` is the default deadline of unary calls, in seconds.
    """

    target: str = "127.0.0.1:50051"
    tls: bool = False
    root_certificates: bytes | None = None
    # Secrets stay out of repr(): settings end up in logs and tracebacks.
    token: str | None = field(default=None, repr=False)
    timeout: float = DEFAULT_TIMEOUT
    extra_options: tuple[tuple[str, Any], ...] = field(default=())
    client_certificate: bytes | None = None
    client_key: bytes | None = field(default=None, repr=False)

    @classmethod
    def build(
        cls,
        target: str,
        *,
        tls: bool = False,
        root_certificates: bytes | None = None,
        tls_ca: PemSource | None = None,
        tls_cert: PemSource | None = None,
        tls_key: PemSource | None = None,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> ChannelSettings:
        """Settings from the clients' keyword arguments: any TLS file turns TLS on;
        ``tls_cert`` and ``tls_key`` come together; ``tls_ca`` wins over the older
        ``root_certificates``."""
        if (tls_cert is None) != (tls_key is None):
            raise ValueError("tls_cert and tls_key go together (mutual TLS needs both)")
        if token is not None and not _is_bearer_token(token):
            # gRPC would refuse it at the first call, with a message that hides why.
            raise ValueError("token must be printable ASCII without spaces or line breaks")
        ca = read_pem(tls_ca, "tls_ca") or root_certificates
        return cls(
            target=target,
            tls=tls or ca is not None or tls_cert is not None,
            root_certificates=ca,
            token=token or None,
            timeout=timeout,
            client_certificate=read_pem(tls_cert, "tls_cert"),
            client_key=read_pem(tls_key, "tls_key"),
        )

    def credentials(self) -> grpc.ChannelCredentials | None:
        """The TLS credentials of the channel, or None for plaintext."""
        if not self.tls:
            return None
        return grpc.ssl_channel_credentials(
            self.root_certificates, self.client_key, self.client_certificate
        )

    def options(self) -> list[tuple[str, Any]]:
        """The channel options: retries, keepalive and message sizes."""
        options: list[tuple[str, Any]] = [
            ("grpc.enable_retries", 1),
            ("grpc.service_config", json.dumps(SERVICE_CONFIG)),
            # A ping every minute on a quiet connection notices a dead peer behind a
            # NAT or load balancer; long StreamJobUpdates calls are often quiet.
            ("grpc.keepalive_time_ms", 60_000),
            ("grpc.keepalive_timeout_ms", 20_000),
            ("grpc.keepalive_permit_without_calls", 0),
            ("grpc.http2.max_pings_without_data", 0),
            # Reconnect within about 2 s of JobService's return however long it was
            # away: grpc's own backoff grows 1.6 times per failed attempt up to 120 s,
            # and calls fail at once meanwhile (the outbox relay delivered 8 s late
            # after a 20 s outage). While it is down: one attempt per 1.6-2.4 s.
            ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
            ("grpc.max_receive_message_length", MAX_RECEIVE_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_SEND_MESSAGE_BYTES),
        ]
        options.extend(self.extra_options)
        return options

    def call_metadata(self) -> tuple[tuple[str, str], ...]:
        """Metadata sent with every call."""
        if self.token:
            return (("authorization", f"Bearer {self.token}"),)
        return ()


class ClientBase(Generic[ChannelT]):
    """What both clients are made from: a target and its settings, or a channel."""

    settings: ChannelSettings

    def __init__(
        self,
        target: str = "127.0.0.1:50051",
        *,
        tls: bool = False,
        root_certificates: bytes | None = None,
        tls_ca: PemSource | None = None,
        tls_cert: PemSource | None = None,
        tls_key: PemSource | None = None,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        channel: ChannelT | None = None,
    ) -> None:
        """Connect to ``target`` (HOST:PORT), or use ``channel`` as given (one with
        interceptors, a test's).

        TLS: ``tls=True`` checks the server against the system roots; ``tls_ca`` (a CA
        certificate: PEM bytes or a file path) against that CA instead, and turns TLS
        on by itself. ``tls_cert`` and ``tls_key`` (PEM bytes or paths, both or
        neither) present a client certificate, for servers that require mutual TLS.
        ``root_certificates`` is the older spelling of ``tls_ca`` (bytes only).
        ``token`` is sent as ``authorization: Bearer TOKEN``. ``timeout`` is the
        default deadline of a unary call, in seconds. A file that cannot be read
        raises ``OSError``; a value that is not PEM, ``ValueError``.
        """
        self.settings = ChannelSettings.build(
            target,
            tls=tls,
            root_certificates=root_certificates,
            tls_ca=tls_ca,
            tls_cert=tls_cert,
            tls_key=tls_key,
            token=token,
            timeout=timeout,
        )
        self._connect(channel)

    def _connect(self, channel: ChannelT | None) -> None:
        raise NotImplementedError


def aio_channel(settings: ChannelSettings) -> grpc.aio.Channel:
    """A grpc.aio channel to ``settings.target``, bound to the running event loop."""
    credentials = settings.credentials()
    if credentials is not None:
        return grpc.aio.secure_channel(settings.target, credentials, settings.options())
    return grpc.aio.insecure_channel(settings.target, settings.options())
