"""san_jobs.shared.health and san_jobs.shared.open_rpcs on a real grpc.aio server on loopback:
grpc's health semantics kept (Check, Watch, set, graceful shutdown), requests
bounded before decoding, Watch streams capped per peer and in all, and slots given
back however a stream ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from san_jobs.shared import memory_return
from san_jobs.shared.health import MAX_SERVICE_NAME_BYTES, HealthServicer
from san_jobs.shared.open_rpcs import PeerStreamCap

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
PER_PEER = 3
TOTAL = 5


class Served:
    def __init__(
        self, health: HealthServicer, cap: PeerStreamCap, stub: health_pb2_grpc.HealthStub
    ) -> None:
        self.health = health
        self.cap = cap
        self.stub = stub


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    # The peer is grpc's peer string: the test's one channel is one peer.
    cap = PeerStreamCap(PER_PEER, TOTAL, "test.san", lambda context: context.peer())
    health = HealthServicer(cap)
    server = grpc.aio.server()
    health.add_to_server(server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield Served(health, cap, health_pb2_grpc.HealthStub(channel))
    await server.stop(0)


def request(name: str) -> health_pb2.HealthCheckRequest:
    return health_pb2.HealthCheckRequest(service=name)


async def test_check_and_watch_follow_set(served: Served) -> None:
    assert (await served.stub.Check(request(""), timeout=5)).status == SERVING
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await served.stub.Check(request("later.Service"), timeout=5)
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
    watch = served.stub.Watch(request("later.Service"), timeout=10)
    assert (await watch.read()).status == SERVICE_UNKNOWN
    await served.health.set("later.Service", SERVING)
    assert (await watch.read()).status == SERVING
    await served.health.set("later.Service", NOT_SERVING)
    assert (await watch.read()).status == NOT_SERVING
    await served.health.set("later.Service", SERVING)
    assert (await watch.read()).status == SERVING
    await served.health.enter_graceful_shutdown()
    assert (await watch.read()).status == NOT_SERVING
    await served.health.set("later.Service", SERVING)  # ignored from now on
    assert (await served.stub.Check(request("later.Service"), timeout=5)).status == NOT_SERVING
    watch.cancel()


async def test_names_are_bounded_before_decoding(served: Served) -> None:
    trims = memory_return.trims()
    for name in ("x" * (MAX_SERVICE_NAME_BYTES + 1), "x" * 1_000_000):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await served.stub.Check(request(name), timeout=5)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "service is too long" in str(refused.value.details())
    watch = served.stub.Watch(request("x" * MAX_SERVICE_NAME_BYTES), timeout=5)
    assert (await watch.read()).status == SERVICE_UNKNOWN
    watch.cancel()
    # The memory a refused request took is given back shortly after.
    for _ in range(50):
        if memory_return.trims() > trims:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("no trim after a refused large request")


async def test_watches_are_capped_and_slots_come_back(served: Served) -> None:
    watches = [served.stub.Watch(request(f"s{i}"), timeout=10) for i in range(PER_PEER)]
    for watch in watches:
        assert (await watch.read()).status == SERVICE_UNKNOWN
    over = served.stub.Watch(request(""), timeout=10)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await over.read()
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "per peer" in str(refused.value.details())
    assert served.cap.open_streams == PER_PEER
    for watch in watches:
        watch.cancel()
    for _ in range(50):
        if served.cap.open_streams == 0:
            break
        await asyncio.sleep(0.05)
    assert served.cap.open_streams == 0, "cancelled watches keep their slots"
