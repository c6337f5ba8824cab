"""Channel settings shared by the sync and asyncio clients, set in one place."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

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


@dataclass(frozen=True, slots=True)
class ChannelSettings:
    """How a client connects to JobService.

    ``tls`` uses TLS with the system roots, or ``root_certificates`` when given.
    ``token`` is sent as ``authorization: Bearer TOKEN`` on every call.
    ``timeout`` is the default deadline of unary calls, in seconds.
    """

    target: str = "127.0.0.1:50051"
    tls: bool = False
    root_certificates: bytes | None = None
    token: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    extra_options: tuple[tuple[str, Any], ...] = field(default=())

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
