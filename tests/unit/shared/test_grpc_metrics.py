"""The RPC metrics interceptor (san_jobs.shared.grpc_metrics) on a real grpc.aio server on
loopback: unary and streaming RPCs are counted once, when they end, with the code
they ended with; streams are in the in-flight gauge while open."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry

from san_jobs.shared.grpc_metrics import GrpcServerMetrics
from tests.support.waiting import wait_until

SERVICE = "test.v1.Probe"
Context = grpc.aio.ServicerContext[Any, Any]


async def ok(request: bytes, context: Context) -> bytes:
    return b"ok"


async def invalid(request: bytes, context: Context) -> bytes:
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad field")
    raise AssertionError("unreachable")


async def set_code(request: bytes, context: Context) -> bytes:
    context.set_code(grpc.StatusCode.NOT_FOUND)
    return b""


async def boom(request: bytes, context: Context) -> bytes:
    raise RuntimeError("a bug")


async def three(request: bytes, context: Context) -> AsyncIterator[bytes]:
    for _ in range(3):
        yield b"x"


async def forever(request: bytes, context: Context) -> AsyncIterator[bytes]:
    yield b"first"
    await asyncio.Event().wait()
    yield b"never"


async def failing_stream(request: bytes, context: Context) -> AsyncIterator[bytes]:
    yield b"first"
    await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "too many")


async def echo_writer(requests: Any, context: Context) -> None:
    # The coroutine style of StreamCalls: read and write through the context.
    while True:
        message = await context.read()
        if message is grpc.aio.EOF:
            return
        await context.write(message)


HANDLERS = {
    "Ok": grpc.unary_unary_rpc_method_handler(ok),
    "Invalid": grpc.unary_unary_rpc_method_handler(invalid),
    "SetCode": grpc.unary_unary_rpc_method_handler(set_code),
    "Boom": grpc.unary_unary_rpc_method_handler(boom),
    "Three": grpc.unary_stream_rpc_method_handler(three),
    "Forever": grpc.unary_stream_rpc_method_handler(forever),
    "FailingStream": grpc.unary_stream_rpc_method_handler(failing_stream),
    "Echo": grpc.stream_stream_rpc_method_handler(echo_writer),
}


class Probe:
    def __init__(self, registry: CollectorRegistry, channel: grpc.aio.Channel) -> None:
        self.registry = registry
        self.channel = channel

    def handled(self, method: str, code: str) -> float:
        value = self.registry.get_sample_value(
            "t_grpc_server_handled_total", {"method": f"{SERVICE}/{method}", "code": code}
        )
        return value or 0.0

    def in_flight(self, method: str) -> float:
        labels = {"method": f"{SERVICE}/{method}"}
        return self.registry.get_sample_value("t_grpc_server_in_flight", labels) or 0.0

    def timed(self, method: str) -> float:
        labels = {"method": f"{SERVICE}/{method}"}
        value = self.registry.get_sample_value("t_grpc_server_handling_seconds_count", labels)
        return value or 0.0


@pytest.fixture
async def probe() -> AsyncIterator[Probe]:
    registry = CollectorRegistry()
    server = grpc.aio.server(interceptors=[GrpcServerMetrics(registry, "t")])
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, HANDLERS)])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield Probe(registry, channel)
    await server.stop(None)


def path(method: str) -> str:
    return f"/{SERVICE}/{method}"


async def test_unary_calls_are_counted_by_method_and_code(probe: Probe) -> None:
    ok_call = probe.channel.unary_unary(path("Ok"))
    for _ in range(2):
        assert await ok_call(b"") == b"ok"
    expected = {
        "Invalid": grpc.StatusCode.INVALID_ARGUMENT,
        "SetCode": grpc.StatusCode.NOT_FOUND,
        "Boom": grpc.StatusCode.UNKNOWN,
    }
    for method, code in expected.items():
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await probe.channel.unary_unary(path(method))(b"")
        assert raised.value.code() == code
    assert probe.handled("Ok", "OK") == 2
    assert probe.timed("Ok") == 2
    for method, code in expected.items():
        assert probe.handled(method, code.name) == 1, method
        assert probe.handled(method, "OK") == 0, method
        assert probe.in_flight(method) == 0
    # An unknown method is grpc's own UNIMPLEMENTED: no label for what a caller invents.
    with pytest.raises(grpc.aio.AioRpcError):
        await probe.channel.unary_unary(path("Invented"))(b"")
    assert probe.handled("Invented", "UNIMPLEMENTED") == 0


async def test_a_stream_is_counted_once_when_it_ends(probe: Probe) -> None:
    answers = [m async for m in probe.channel.unary_stream(path("Three"))(b"")]
    assert answers == [b"x"] * 3
    await wait_until(lambda: probe.handled("Three", "OK") == 1, "the stream counted")
    assert probe.timed("Three") == 1

    failing = probe.channel.unary_stream(path("FailingStream"))(b"")
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        async for _ in failing:
            pass
    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    await wait_until(
        lambda: probe.handled("FailingStream", "RESOURCE_EXHAUSTED") == 1, "the abort counted"
    )


async def test_an_open_stream_is_in_flight_until_the_client_cancels_it(probe: Probe) -> None:
    call = probe.channel.unary_stream(path("Forever"))(b"")
    assert await call.read() == b"first"
    assert probe.in_flight("Forever") == 1
    assert probe.handled("Forever", "OK") == 0  # not counted while open
    call.cancel()
    await wait_until(lambda: probe.handled("Forever", "CANCELLED") == 1, "the cancel counted")
    assert probe.in_flight("Forever") == 0


async def test_a_coroutine_bidi_stream_is_counted(probe: Probe) -> None:
    call = probe.channel.stream_stream(path("Echo"))()
    await call.write(b"a")
    assert await call.read() == b"a"
    assert probe.in_flight("Echo") == 1
    await call.done_writing()
    assert await call.code() == grpc.StatusCode.OK
    await wait_until(lambda: probe.handled("Echo", "OK") == 1, "the bidi stream counted")
    assert probe.in_flight("Echo") == 0


async def test_a_deadline_passed_is_deadline_exceeded(probe: Probe) -> None:
    call = probe.channel.unary_stream(path("Forever"))(b"", timeout=0.3)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        async for _ in call:
            pass
    assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    await wait_until(
        lambda: probe.handled("Forever", "DEADLINE_EXCEEDED") == 1, "the deadline counted"
    )


def _names(registry: CollectorRegistry) -> Iterator[tuple[str, str]]:
    for family in registry.collect():
        yield family.name, family.documentation


def test_every_metric_has_help_text() -> None:
    registry = CollectorRegistry()
    GrpcServerMetrics(registry, "t")
    names = dict(_names(registry))
    assert set(names) == {
        "t_grpc_server_handled",
        "t_grpc_server_handling_seconds",
        "t_grpc_server_in_flight",
    }
    assert all(names.values())
