"""Fixtures: an in-process gateway on a loopback port, and a fake OpenAI-compatible server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest
from gateway_helpers import StartGateway

from san_jobs.ai_gateway.backends.base import Backend
from san_jobs.ai_gateway.server import GatewayServer
from san_jobs.ai_gateway.settings import GatewaySettings
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2_grpc
from tests.support.fake_openai_server import FakeOpenAI


@pytest.fixture
async def start_gateway() -> AsyncIterator[StartGateway]:
    """Start a gateway with the given settings; returns an async stub (cleaned up after)."""
    servers: list[GatewayServer] = []
    channels: list[grpc.aio.Channel] = []

    async def start(impl: Backend | None = None, /, **overrides: Any) -> Any:
        settings = GatewaySettings(listen="127.0.0.1:0", **overrides)
        server = GatewayServer(settings, impl)
        servers.append(server)
        port = await server.start()
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        channels.append(channel)
        start.port = port  # type: ignore[attr-defined]
        return ai_gateway_pb2_grpc.AiGatewayServiceStub(channel)

    start.servers = servers  # type: ignore[attr-defined]  # for tests that reach the server
    yield start
    for channel in channels:
        await channel.close()
    for server in servers:
        await server.stop(0)


@pytest.fixture(scope="module")
def fake_openai() -> Iterator[FakeOpenAI]:
    """One fake upstream per test module; behaviour is chosen by the model name."""
    server = FakeOpenAI()
    server.start()
    yield server
    server.stop()
