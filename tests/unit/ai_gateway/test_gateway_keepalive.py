"""JobService's gateway channel pings a quiet StreamCalls stream; the gateway must take
those pings, or it ends the connection with "too_many_pings" and fails the calls on it
(grpc's default server policy takes more than one such ping per 5 minutes as abuse)."""

from __future__ import annotations

from ai_gateway.server import SERVER_OPTIONS
from job_service.gateway_client import CHANNEL_OPTIONS


def test_the_gateway_accepts_job_service_keepalive_pings() -> None:
    server = dict(SERVER_OPTIONS)
    client = dict(CHANNEL_OPTIONS)
    assert (
        client["grpc.keepalive_time_ms"] >= server["grpc.http2.min_ping_interval_without_data_ms"]
    )
