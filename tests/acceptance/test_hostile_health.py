"""Issue 22, point 1: health (and open reflection) calls without a token are bounded,
on both services as real processes.

A service name over 256 bytes is INVALID_ARGUMENT before anything is kept; Watch
streams beyond the per-peer bound are RESOURCE_EXHAUSTED; the service still answers;
and a burst of hostile calls (megabyte names, cancelled; unknown names held open,
then cancelled) leaves the resident set within 20 MiB of where it started.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_status import rpc_status

from tests.support.processes import RunningService, running, start_gateway, start_job_service
from tests.support.waiting import wait_until

MIB = 1024 * 1024
SERVING = health_pb2.HealthCheckResponse.SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
# job-service started with --max-streams-per-peer 6; the gateway's bound is fixed.
JOB_SERVICE_PER_PEER = 6
GATEWAY_PER_PEER = 32
HOSTILE_LARGE = 40  # 1 MiB names, cancelled
GROWTH_BOUND_MIB = 20
OPTIONS = [("grpc.max_send_message_length", -1)]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[RunningService]:
    tokens = tmp_path / "callers.txt"
    tokens.write_text("web 0123456789abcdef0123456789abcdef\n")
    with running(start_gateway(tmp_path, "--caller-tokens-file", str(tokens))) as service:
        yield service


@pytest.fixture
def job_service(tmp_path: Path, gateway: RunningService) -> Iterator[RunningService]:
    service = start_job_service(
        tmp_path,
        "--max-streams-per-peer",
        str(JOB_SERVICE_PER_PEER),
        gateway=gateway.address,
    )
    with running(service):
        yield service


def bad_field(error: grpc.aio.AioRpcError) -> str:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None, error
    bad = error_details_pb2.BadRequest()
    assert status.details[-1].Unpack(bad)
    return str(bad.field_violations[0].field)


async def refuses_long_names(stub: health_pb2_grpc.HealthStub) -> None:
    for name in ("x" * 257, "x" * MIB):
        with pytest.raises(grpc.aio.AioRpcError) as check:
            await stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=10)
        assert check.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert bad_field(check.value) == "service"
        watch = stub.Watch(health_pb2.HealthCheckRequest(service=name), timeout=10)
        with pytest.raises(grpc.aio.AioRpcError) as watched:
            await watch.read()
        assert watched.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # 256 bytes is still a name (an unknown one).
    watch = stub.Watch(health_pb2.HealthCheckRequest(service="x" * 256), timeout=10)
    assert (await watch.read()).status == SERVICE_UNKNOWN
    watch.cancel()


async def caps_watches_per_peer(stub: health_pb2_grpc.HealthStub, per_peer: int) -> None:
    watches = [
        stub.Watch(health_pb2.HealthCheckRequest(service=f"no.such.S{i}")) for i in range(per_peer)
    ]
    for watch in watches:
        assert (await watch.read()).status == SERVICE_UNKNOWN
    one_more = stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=10)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await one_more.read()
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # Unary health still answers meanwhile; a slot freed is usable again.
    assert (
        await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
    ).status == SERVING
    watches.pop().cancel()

    async def admitted_again() -> bool:
        again = stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=10)
        try:
            return (await again.read()).status == SERVING
        except grpc.aio.AioRpcError:
            return False
        finally:
            again.cancel()

    for _ in range(50):
        if await admitted_again():
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("a cancelled Watch never gave its slot back")
    for watch in watches:
        watch.cancel()


async def refuses_large_reflection(channel: grpc.aio.Channel) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)

    async def requests():  # type: ignore[no-untyped-def]
        yield reflection_pb2.ServerReflectionRequest(file_by_filename="x" * (64 * 1024))

    with pytest.raises(grpc.aio.AioRpcError) as refused:
        async for _ in stub.ServerReflectionInfo(requests(), timeout=10):
            pass
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def hostile_burst(address: str, per_peer: int) -> None:
    async with grpc.aio.insecure_channel(address, options=OPTIONS) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        name = "x" * MIB
        for _wave in range(HOSTILE_LARGE // 10):
            calls = [stub.Watch(health_pb2.HealthCheckRequest(service=name)) for _ in range(10)]
            for call in calls:
                with pytest.raises(grpc.aio.AioRpcError):
                    await call.read()
        opened = [
            stub.Watch(health_pb2.HealthCheckRequest(service=f"u{i}")) for i in range(per_peer * 3)
        ]
        for call in opened:
            try:
                await call.read()
            except grpc.aio.AioRpcError as error:
                assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        for call in opened:
            call.cancel()


async def check_bounds(service: RunningService, per_peer: int) -> None:
    async with grpc.aio.insecure_channel(service.address, options=OPTIONS) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        assert (
            await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        ).status == SERVING
        before = rss_mib(service.proc.pid)
        await refuses_long_names(stub)
        await caps_watches_per_peer(stub, per_peer)
        await refuses_large_reflection(channel)
    await hostile_burst(service.address, per_peer)
    # Memory is given back within seconds of the burst (san_jobs.shared.memory_return).
    await wait_until(
        lambda: rss_mib(service.proc.pid) <= before + GROWTH_BOUND_MIB,
        f"{service.name} RSS back within {GROWTH_BOUND_MIB} MiB of {before:.0f} MiB",
        within=15,
    )
    async with grpc.aio.insecure_channel(service.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        assert (
            await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        ).status == SERVING


def test_gateway_health_is_bounded(gateway: RunningService) -> None:
    asyncio.run(check_bounds(gateway, GATEWAY_PER_PEER))


def test_job_service_health_is_bounded(job_service: RunningService) -> None:
    asyncio.run(check_bounds(job_service, JOB_SERVICE_PER_PEER))
