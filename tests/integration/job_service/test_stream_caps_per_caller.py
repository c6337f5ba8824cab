"""Per-caller stream bounds count callers, not addresses (issue 22, point 6): under
--auth token every client here is on one address and one connection (127.0.0.1), and
each token has a bound of its own, over real gRPC on a loopback port (SQLite and
PostgreSQL)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import grpc
import pytest

from san_jobs.job_service.auth.bearer_tokens import new_token, token_hash
from san_jobs.job_service.auth.roles import Role
from san_jobs.job_service.storage.api_tokens import SqlTokenStore
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from tests.integration.job_service.conftest import Service, StartService
from tests.integration.job_service.scripted_gateway import Hang
from tests.support.jobs_api import SAMPLE_TEXT, card_request
from tests.support.rich_errors import RichError, rich_error

StreamCall = Any  # grpc.aio.UnaryStreamCall; grpc-stubs leaves it untyped here
Metadata = tuple[tuple[str, str], ...]


async def start(start_service: StartService, **limits: int) -> tuple[Service, dict[str, Metadata]]:
    service = await start_service(auth="token", workers=1, **limits)
    service.gateway.script = lambda _j, _a: Hang()  # jobs stay active: streams stay open
    store = SqlTokenStore(service.runtime.store.engine)
    tokens: dict[str, Metadata] = {}
    for name, role in [
        ("viewer", Role.VIEWER),
        ("operator", Role.OPERATOR),
        ("alice", Role.SUBMITTER),
        ("bob", Role.SUBMITTER),
    ]:
        token = new_token()
        await store.add(name, role.value, token_hash(token))
        tokens[name] = (("authorization", f"Bearer {token}"),)
    return service, tokens


async def until(condition: Any) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the server never got there")


async def open_feed(service: Service, md: Metadata) -> StreamCall:
    before = service.runtime.stream_gate.open_feeds
    call = service.stub.StreamJobUpdates(pb.StreamJobUpdatesRequest(), metadata=md, timeout=30)
    await until(lambda: service.runtime.stream_gate.open_feeds == before + 1 or call.done())
    assert not call.done(), f"feed refused: {await call.code()}"
    return call


async def open_stream(service: Service, md: Metadata, job_id: str) -> StreamCall:
    request = pb.StreamJobUpdatesRequest(job_ids=[job_id])
    call = service.stub.StreamJobUpdates(request, metadata=md, timeout=30)
    first = await call.read()
    assert first is not grpc.aio.EOF and first.job.id == job_id
    return call


async def refused(call: StreamCall) -> RichError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call.read()
    error = rich_error(caught.value)
    assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED, error
    assert (error.domain, error.reason) == ("jobs.san", "TOO_MANY_STREAMS")
    return error


async def enqueue(service: Service, md: Metadata) -> str:
    request = card_request(f"caps-{uuid.uuid4().hex[:12]}", SAMPLE_TEXT)
    return str((await service.stub.Enqueue(request, metadata=md, timeout=10)).job.id)


async def test_a_viewer_s_feeds_over_its_bound_do_not_stop_the_operator_s_feed(
    start_service: StartService,
) -> None:
    service, tokens = await start(start_service, max_feeds_per_peer=2)
    feeds = [await open_feed(service, tokens["viewer"]) for _ in range(2)]

    extra = service.stub.StreamJobUpdates(pb.StreamJobUpdatesRequest(), metadata=tokens["viewer"])
    error = await refused(extra)
    assert error.metadata == {"limit": "max-feeds-per-peer", "maxStreams": "2"}

    # Same address, same connection, another caller: a bound of its own.
    feeds += [await open_feed(service, tokens["operator"]) for _ in range(2)]
    assert service.runtime.stream_gate.open_for_peer("caller:operator") == 2
    assert error.quota_violations == ["caller:viewer"]
    assert "per caller" in error.message
    for call in feeds:
        call.cancel()


async def test_bob_s_job_streams_over_his_bound_do_not_stop_alice_s(
    start_service: StartService,
) -> None:
    service, tokens = await start(start_service, max_streams_per_peer=3)
    bobs_job = await enqueue(service, tokens["bob"])
    alices_job = await enqueue(service, tokens["alice"])
    streams = [await open_stream(service, tokens["bob"], bobs_job) for _ in range(3)]

    extra = service.stub.StreamJobUpdates(
        pb.StreamJobUpdatesRequest(job_ids=[bobs_job]), metadata=tokens["bob"]
    )
    error = await refused(extra)
    assert error.metadata == {"limit": "max-streams-per-peer", "maxStreams": "3"}

    streams += [await open_stream(service, tokens["alice"], alices_job) for _ in range(3)]
    assert error.quota_violations == ["caller:bob"]
    gate = service.runtime.stream_gate
    assert (gate.open_for_peer("caller:bob"), gate.open_for_peer("caller:alice")) == (3, 3)
    assert gate.open_for_peer("127.0.0.1") == 0  # nothing counted by address
    for call in streams:
        call.cancel()
    await until(lambda: gate.open_streams == 0)
