"""StreamJobUpdates bounds (issue 9, point 3) over real gRPC on loopback ports, on
SQLite and PostgreSQL: per peer, per connection, in total, and for live feeds.

Two peers on one machine: the service listens on [::] and clients connect to
127.0.0.1 (peer "127.0.0.1") and to [::1] (peer "::1"). grpc cannot bind a client
to 127.0.0.2 (Linux picks 127.0.0.1 as the source anyway), so IPv4 vs IPv6 it is.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from tests.integration.job_service.conftest import Service, StartService
from tests.integration.job_service.scripted_gateway import Hang
from tests.support.jobs_api import card_request
from tests.support.rich_errors import RichError, rich_error

StreamCall = Any  # grpc.aio.UnaryStreamCall; grpc-stubs leaves it untyped here


@pytest.fixture
async def open_channels() -> AsyncIterator[list[grpc.aio.Channel]]:
    channels: list[grpc.aio.Channel] = []
    yield channels
    for channel in channels:
        await channel.close()


async def start(start_service: StartService, **limits: int) -> Service:
    # [::] is beyond loopback: these tests need two peer addresses, not TLS or tokens.
    service = await start_service(listen="[::]:0", insecure=True, auth="off", **limits)
    service.gateway.script = lambda _j, _a: Hang()  # jobs stay active: streams stay open
    return service


def connect(
    service: Service, channels: list[grpc.aio.Channel], host: str, *, own_connection: bool = False
) -> pb_grpc.JobServiceStub:
    """A stub on a channel to `host`; `own_connection` keeps grpc from sharing one
    TCP connection between channels to the same address."""
    options = [("grpc.use_local_subchannel_pool", 1)] if own_connection else []
    channel = grpc.aio.insecure_channel(f"{host}:{service.runtime.port}", options=options)
    channels.append(channel)
    return pb_grpc.JobServiceStub(channel)


async def open_stream(stub: pb_grpc.JobServiceStub, job_id: str) -> StreamCall:
    """A job-id stream that the server accepted (its snapshot has arrived)."""
    call = stub.StreamJobUpdates(pb.StreamJobUpdatesRequest(job_ids=[job_id]), timeout=30)
    first = await call.read()
    assert first is not grpc.aio.EOF and first.job.id == job_id
    return call


async def open_feed(service: Service, stub: pb_grpc.JobServiceStub) -> StreamCall:
    """A live feed the server accepted (feeds send nothing at first: watch the count)."""
    before = service.runtime.stream_gate.open_feeds
    call = stub.StreamJobUpdates(pb.StreamJobUpdatesRequest(), timeout=30)
    await until(lambda: service.runtime.stream_gate.open_feeds == before + 1 or call.done())
    assert not call.done(), f"feed refused: {await call.code()}"
    return call


async def refused(call: StreamCall) -> RichError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call.read()
    error = rich_error(caught.value)
    assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED, error
    assert (error.domain, error.reason) == ("jobs.san", "TOO_MANY_STREAMS")
    return error


async def until(condition: Any) -> None:
    """Wait for a server-side effect (a cancel reaching the server, say)."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the server never got there")


async def enqueue(stub: pb_grpc.JobServiceStub) -> str:
    reply = await stub.Enqueue(card_request(f"caps-{uuid.uuid4()}", "Text."), timeout=10)
    return str(reply.job.id)


async def test_a_peer_past_its_bound_is_refused_others_are_not(
    start_service: StartService, open_channels: list[grpc.aio.Channel]
) -> None:
    service = await start(start_service, max_streams_per_peer=3)
    ipv4 = connect(service, open_channels, "127.0.0.1")
    ipv6 = connect(service, open_channels, "[::1]")
    job_id = await enqueue(ipv4)
    streams = [await open_stream(ipv4, job_id) for _ in range(3)]

    error = await refused(ipv4.StreamJobUpdates(pb.StreamJobUpdatesRequest(job_ids=[job_id])))
    assert error.metadata == {"limit": "max-streams-per-peer", "maxStreams": "3"}
    assert error.quota_violations == ["peer:127.0.0.1"]
    assert "--max-streams-per-peer" in error.message

    # Another peer is not refused; unary calls on the full connection still answer.
    others = [await open_stream(ipv6, job_id) for _ in range(3)]
    assert (await ipv4.GetJob(pb.GetJobRequest(job_id=job_id), timeout=10)).job.id == job_id
    await enqueue(ipv4)

    # A cancelled stream frees its slot.
    streams[0].cancel()
    await until(lambda: service.runtime.stream_gate.open_for_peer("127.0.0.1") == 2)
    streams[0] = await open_stream(ipv4, job_id)
    for call in streams + others:
        call.cancel()


async def test_a_connection_and_the_instance_have_their_own_bounds(
    start_service: StartService, open_channels: list[grpc.aio.Channel]
) -> None:
    service = await start(start_service, max_streams_per_connection=2, max_streams=3)
    first = connect(service, open_channels, "127.0.0.1")
    second = connect(service, open_channels, "127.0.0.1", own_connection=True)
    ipv6 = connect(service, open_channels, "[::1]")
    job_id = await enqueue(first)
    calls = [await open_stream(first, job_id) for _ in range(2)]

    error = await refused(first.StreamJobUpdates(pb.StreamJobUpdatesRequest(job_ids=[job_id])))
    assert error.metadata["limit"] == "max-streams-per-connection"
    assert error.quota_violations[0].startswith("connection:ipv4:127.0.0.1:")

    # Same peer, another connection: its own room, up to the instance's bound.
    calls.append(await open_stream(second, job_id))
    for stub in (second, ipv6):
        error = await refused(stub.StreamJobUpdates(pb.StreamJobUpdatesRequest(job_ids=[job_id])))
        assert error.metadata == {"limit": "max-streams", "maxStreams": "3"}
        assert error.quota_violations == ["service"]
    await enqueue(first)
    for call in calls:
        call.cancel()


async def test_live_feeds_have_smaller_bounds_of_their_own(
    start_service: StartService, open_channels: list[grpc.aio.Channel]
) -> None:
    service = await start(start_service, max_feeds_per_peer=1, max_feeds=1)
    ipv4 = connect(service, open_channels, "127.0.0.1")
    ipv6 = connect(service, open_channels, "[::1]")
    feed = await open_feed(service, ipv4)

    error = await refused(ipv4.StreamJobUpdates(pb.StreamJobUpdatesRequest()))
    assert error.metadata == {"limit": "max-feeds-per-peer", "maxStreams": "1"}
    error = await refused(ipv6.StreamJobUpdates(pb.StreamJobUpdatesRequest()))
    assert error.metadata == {"limit": "max-feeds", "maxStreams": "1"}

    # Job-id streams are not feeds: still welcome.
    job_id = await enqueue(ipv4)
    stream = await open_stream(ipv4, job_id)
    feed.cancel()
    stream.cancel()
    await until(lambda: service.runtime.stream_gate.open_streams == 0)
    await open_feed(service, ipv6)


async def test_the_slot_is_freed_however_a_stream_ends(
    start_service: StartService, open_channels: list[grpc.aio.Channel]
) -> None:
    service = await start(start_service, max_streams_per_peer=1)
    stub = connect(service, open_channels, "127.0.0.1")
    gate = service.runtime.stream_gate
    job_id = await enqueue(stub)

    # Ends with OK: its job is cancelled (terminal).
    call = await open_stream(stub, job_id)
    await stub.CancelJob(pb.CancelJobRequest(job_id=job_id, reason="done"), timeout=10)
    while (update := await call.read()) is not grpc.aio.EOF:
        last = update
    assert last.job.status == pb.JOB_STATUS_CANCELLED
    assert await call.code() == grpc.StatusCode.OK
    await until(lambda: gate.open_streams == 0)

    # Ends with an error after it was admitted: NOT_FOUND.
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.StreamJobUpdates(
            pb.StreamJobUpdatesRequest(job_ids=[str(uuid.uuid4())]), timeout=10
        ).read()
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    await until(lambda: gate.open_streams == 0)

    # Ends by the client's deadline.
    job_id = await enqueue(stub)
    call = stub.StreamJobUpdates(pb.StreamJobUpdatesRequest(job_ids=[job_id]), timeout=0.5)
    await call.read()
    assert await call.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    await until(lambda: gate.open_streams == 0)

    # Ends by the client's cancel, and the slot is usable again.
    call = await open_stream(stub, job_id)
    call.cancel()
    await until(lambda: gate.open_streams == 0)
    call = await open_stream(stub, job_id)
    call.cancel()


async def test_server_stop_frees_every_slot(
    start_service: StartService, open_channels: list[grpc.aio.Channel]
) -> None:
    service = await start(start_service)
    stub = connect(service, open_channels, "127.0.0.1")
    job_id = await enqueue(stub)
    calls = [await open_stream(stub, job_id) for _ in range(3)]
    calls.append(await open_feed(service, stub))
    assert service.runtime.stream_gate.open_streams == 4
    await service.runtime.server.stop(0.1)
    # Whether these in-process clients get a status from a stopped server is grpc's
    # affair (some wait for their deadline, on today's main too); the slots are ours.
    await until(lambda: service.runtime.stream_gate.open_streams == 0)
    assert service.runtime.hub.subscription_count == 0
    for call in calls:
        call.cancel()
