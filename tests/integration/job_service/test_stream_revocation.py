"""Open streams end when their token stops being valid (issue 22, points 5 and 12),
on a real in-process JobService under --auth token (loopback port, SQLite and
PostgreSQL): a revoked token's live feed and job-id stream end UNAUTHENTICATED
within the verifier's cache period, another caller's stream goes on; a token with an
expiry is refused from that moment and its streams end too."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest

from san_jobs.job_service.auth.bearer_tokens import CACHE_SECONDS, new_token, token_hash
from san_jobs.job_service.auth.roles import Role
from san_jobs.job_service.storage.api_tokens import SqlTokenStore
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from tests.integration.job_service.conftest import Service, StartService
from tests.integration.job_service.scripted_gateway import Hang
from tests.support.jobs_api import SAMPLE_TEXT, card_request
from tests.support.rich_errors import rich_error

StreamCall = Any  # grpc.aio.UnaryStreamCall; grpc-stubs leaves it untyped here
Metadata = tuple[tuple[str, str], ...]
# A stream ends within one cache period of the revocation, plus a look-up and the
# trip of the status back: the slack is for a loaded test machine, not the design.
SLACK_SECONDS = 1.5


def bearer(token: str) -> Metadata:
    return (("authorization", f"Bearer {token}"),)


async def add_token(
    service: Service, name: str, role: Role, expires_at: datetime | None = None
) -> Metadata:
    token = new_token()
    store = SqlTokenStore(service.runtime.store.engine)
    if expires_at is None:
        await store.add(name, role.value, token_hash(token))
    else:
        await store.add(name, role.value, token_hash(token), expires_at=expires_at)
    return bearer(token)


@pytest.fixture
async def secured(start_service: StartService) -> Service:
    service = await start_service(auth="token", workers=1)
    service.gateway.script = lambda _job, _attempt: Hang()  # jobs stay open: streams too
    return service


async def until(condition: Any) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the server never got there")


async def open_feed(service: Service, md: Metadata) -> StreamCall:
    """A live feed the server admitted (a feed sends nothing at first: watch the gate)."""
    before = service.runtime.stream_gate.open_feeds
    call = service.stub.StreamJobUpdates(pb.StreamJobUpdatesRequest(), metadata=md, timeout=60)
    await until(lambda: service.runtime.stream_gate.open_feeds == before + 1 or call.done())
    assert not call.done(), f"feed refused: {await call.code()}"
    return call


async def open_stream(service: Service, md: Metadata, job_id: str) -> StreamCall:
    """A job-id stream whose snapshot has arrived."""
    request = pb.StreamJobUpdatesRequest(job_ids=[job_id])
    call = service.stub.StreamJobUpdates(request, metadata=md, timeout=60)
    first = await call.read()
    assert first is not grpc.aio.EOF and first.job.id == job_id
    return call


async def enqueue(service: Service, md: Metadata) -> str:
    request = card_request(f"rev-{uuid.uuid4().hex[:12]}", SAMPLE_TEXT)
    return str((await service.stub.Enqueue(request, metadata=md, timeout=10)).job.id)


async def ended_unauthenticated(call: StreamCall, within: float) -> float:
    """Read `call` until it ends, at most `within` seconds; it must end UNAUTHENTICATED
    (with the interceptor's ErrorInfo). The seconds it took."""
    started = time.monotonic()

    async def drain() -> None:
        while await call.read() is not grpc.aio.EOF:
            pass

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await asyncio.wait_for(drain(), within)
    error = rich_error(caught.value)
    assert error.code == grpc.StatusCode.UNAUTHENTICATED, error
    assert (error.domain, error.reason) == ("jobs.san", "UNAUTHENTICATED")
    return time.monotonic() - started


async def test_revoking_a_token_ends_its_open_feed_and_job_stream(secured: Service) -> None:
    viewer = await add_token(secured, "viewer", Role.VIEWER)
    alice = await add_token(secured, "alice", Role.SUBMITTER)
    operator = await add_token(secured, "operator", Role.OPERATOR)
    job_id = await enqueue(secured, alice)
    feed = await open_feed(secured, viewer)
    stream = await open_stream(secured, alice, job_id)
    others_feed = await open_feed(secured, operator)

    store = SqlTokenStore(secured.runtime.store.engine)
    assert await store.revoke("viewer") and await store.revoke("alice")
    delays = await asyncio.gather(
        ended_unauthenticated(feed, CACHE_SECONDS + SLACK_SECONDS),
        ended_unauthenticated(stream, CACHE_SECONDS + SLACK_SECONDS),
    )
    print(f"streams ended {delays[0]:.2f} s and {delays[1]:.2f} s after the revocation")

    # Their slots are free; the operator's feed goes on and still gets every change.
    await until(lambda: secured.runtime.stream_gate.open_streams == 1)
    assert not others_feed.done()
    operators_job = await enqueue(secured, operator)
    # The operator's feed shows every caller's jobs: alice's job may still be moving
    # (claimed, completed) ahead of the new one, which must come through.
    seen: list[str] = []
    async with asyncio.timeout(10):
        while operators_job not in seen:
            update = await others_feed.read()
            assert update is not grpc.aio.EOF, "the operator's feed ended"
            seen.append(update.job.id)
    assert set(seen) <= {job_id, operators_job}
    others_feed.cancel()


async def test_an_expired_token_is_refused_from_its_expiry_and_its_streams_end(
    secured: Service,
) -> None:
    lifetime = 2.0
    expires_at = datetime.now(UTC) + timedelta(seconds=lifetime)
    temporary = await add_token(secured, "temporary", Role.OPERATOR, expires_at)
    started = time.monotonic()
    stats = pb.GetJobStatsRequest()
    await secured.stub.GetJobStats(stats, metadata=temporary, timeout=10)  # cached as good
    job_id = await enqueue(secured, temporary)
    feed = await open_feed(secured, temporary)
    stream = await open_stream(secured, temporary, job_id)

    # Refused at its expiry though the verdict is still cached: the expiry is checked
    # on every call, not at the next look-up.
    await asyncio.sleep(max(0.0, lifetime - (time.monotonic() - started)) + 0.1)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await secured.stub.GetJobStats(stats, metadata=temporary, timeout=10)
    assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED
    await asyncio.gather(
        ended_unauthenticated(feed, CACHE_SECONDS + SLACK_SECONDS),
        ended_unauthenticated(stream, CACHE_SECONDS + SLACK_SECONDS),
    )


async def test_a_token_made_already_expired_is_refused_and_a_later_one_is_not(
    secured: Service,
) -> None:
    now = datetime.now(UTC)
    past = await add_token(secured, "past", Role.VIEWER, now - timedelta(seconds=1))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await secured.stub.GetJobStats(pb.GetJobStatsRequest(), metadata=past, timeout=10)
    assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED
    later = await add_token(secured, "later", Role.VIEWER, now + timedelta(days=90))
    await secured.stub.GetJobStats(pb.GetJobStatsRequest(), metadata=later, timeout=10)

    # The expired name takes a new token without a revoke; the old row is retired.
    again = await add_token(secured, "past", Role.VIEWER)
    await secured.stub.GetJobStats(pb.GetJobStatsRequest(), metadata=again, timeout=10)
    rows = [t for t in await SqlTokenStore(secured.runtime.store.engine).list() if t.name == "past"]
    assert [(t.revoked, t.expires_at is None) for t in rows] == [(True, False), (False, True)]
