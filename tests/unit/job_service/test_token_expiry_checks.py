"""Token expiry in TokenVerifier (checked against the wall clock on every call, cached
verdict or not), its fresh look-ups; StreamChecks: one look-up per distinct token per
sweep, however many streams, ending only the streams of tokens that fail; and the
interceptor's stream wrapper, both ways a revoked stream ends (cancelled while it
waits in its handler, or marked while grpc sends and ended before the next one)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from san_jobs.job_service.auth.bearer_tokens import TokenVerifier, new_token, token_hash
from san_jobs.job_service.auth.interceptor import AuthInterceptor
from san_jobs.job_service.auth.stream_checks import StreamChecks
from san_jobs.job_service.storage.api_tokens import StoredToken
from tests.support.clock import FakeClock
from tests.unit.job_service.test_token_verifier import Clock, FakeTokens

START = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


async def test_an_expiring_token_is_refused_from_its_expiry_though_cached() -> None:
    tokens, clock, wall = FakeTokens(), Clock(), FakeClock(START)
    verifier = TokenVerifier(tokens, ttl=2.0, clock=clock, wall_clock=wall)
    token = new_token()
    tokens.rows[token_hash(token)] = StoredToken(
        "ci", "viewer", START, None, START + timedelta(seconds=1)
    )
    assert (await verifier.verify(token)) is not None
    wall.advance(0.999)
    assert (await verifier.verify(token)) is not None
    wall.advance(0.001)
    assert (await verifier.verify(token)) is None
    assert tokens.look_ups == 1  # the cached verdict carried the expiry


async def test_fresh_looks_up_again_whatever_is_cached() -> None:
    tokens, clock = FakeTokens(), Clock()
    verifier = TokenVerifier(tokens, ttl=2.0, clock=clock)
    token = new_token()
    tokens.add(token)
    assert (await verifier.verify(token)) is not None
    tokens.revoke(token)
    assert (await verifier.verify(token)) is not None  # cached
    assert (await verifier.verify(token, fresh=True)) is None
    assert (await verifier.verify(token)) is None  # and the cache now says so
    assert tokens.look_ups == 2


async def test_a_sweep_looks_each_token_up_once_and_ends_only_the_failed_ones() -> None:
    looked_up: list[str] = []
    good = {"web", "ops"}

    async def verify(token: str) -> StoredToken | None:
        looked_up.append(token)
        return StoredToken(token, "viewer", START, None) if token in good else None

    checks = StreamChecks(verify, period=3600)

    async def stream(token: str) -> None:
        opened = checks.open(token, token, "StreamJobUpdates")
        try:
            opened.waiting = True
            await asyncio.Event().wait()  # a handler waiting for the next change
        finally:
            checks.close(opened)

    tasks = [asyncio.ensure_future(stream("web")) for _ in range(100)]
    tasks.append(asyncio.ensure_future(stream("ops")))
    await asyncio.sleep(0)
    assert checks.open_streams == 101
    good.discard("ops")  # revoked
    await checks.sweep()
    assert sorted(looked_up) == ["ops", "web"]
    await asyncio.sleep(0)
    assert tasks[-1].cancelled() and not any(task.done() for task in tasks[:-1])
    assert checks.open_streams == 100
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert checks.open_streams == 0


async def test_a_sweep_that_cannot_reach_the_database_ends_nothing() -> None:
    async def verify(token: str) -> StoredToken | None:
        raise ConnectionError("database down")

    checks = StreamChecks(verify, period=3600)
    opened = checks.open("web", "web", "StreamJobUpdates")
    opened.waiting = True
    await checks.sweep()
    assert not opened.ended
    checks.close(opened)


# -- the interceptor's stream wrapper, driven without a server ----------------------------


class FakeContext:
    """What the wrapper uses of a grpc.aio context: abort_with_status."""

    def __init__(self) -> None:
        self.status: grpc.Status | None = None

    async def abort_with_status(self, status: grpc.Status) -> None:
        self.status = status
        raise grpc.aio.AbortError()


async def guarded_stream(
    tokens: FakeTokens, token: str, handler_responses: Any
) -> tuple[AuthInterceptor, Any, FakeContext]:
    """The interceptor's wrapped StreamJobUpdates, its response iterator and context."""
    interceptor = AuthInterceptor(TokenVerifier(tokens))

    async def continuation(_: object) -> Any:
        return grpc.unary_stream_rpc_method_handler(handler_responses)

    details = SimpleNamespace(
        method="/san.jobs.v1.JobService/StreamJobUpdates",
        invocation_metadata=(("authorization", f"Bearer {token}"),),
    )
    handler = await interceptor.intercept_service(continuation, details)  # type: ignore[arg-type]
    context = FakeContext()
    return interceptor, handler.unary_stream(SimpleNamespace(job_ids=[]), context), context


async def test_a_stream_marked_while_grpc_sends_ends_before_asking_for_more() -> None:
    tokens = FakeTokens()
    token = new_token()
    tokens.add(token)
    asked: list[int] = []
    closed = asyncio.Event()

    async def handler(_: object, __: object) -> AsyncIterator[str]:
        try:
            for n in range(10):
                asked.append(n)
                yield f"update {n}"
        finally:
            closed.set()

    interceptor, responses, context = await guarded_stream(tokens, token, handler)
    assert await anext(responses) == "update 0"
    checks = interceptor.stream_checks
    assert checks is not None and checks.open_streams == 1
    tokens.revoke(token)
    await checks.sweep()  # the stream is not waiting in the handler: marked only
    with pytest.raises(grpc.aio.AbortError):
        await anext(responses)
    assert asked == [0] and closed.is_set()  # no further response asked for; handler closed
    assert context.status is not None and context.status.code is grpc.StatusCode.UNAUTHENTICATED
    assert checks.open_streams == 0


async def test_a_stream_waiting_in_its_handler_is_cancelled_and_ends_unauthenticated() -> None:
    tokens = FakeTokens()
    token = new_token()
    tokens.add(token)
    cancelled = asyncio.Event()

    async def handler(_: object, __: object) -> AsyncIterator[str]:
        yield "snapshot"
        try:
            await asyncio.Event().wait()  # no change ever comes
        except asyncio.CancelledError:
            cancelled.set()
            raise
        yield "never"

    interceptor, responses, context = await guarded_stream(tokens, token, handler)
    assert await anext(responses) == "snapshot"
    reading = asyncio.ensure_future(anext(responses))
    await asyncio.sleep(0)
    checks = interceptor.stream_checks
    assert checks is not None
    tokens.revoke(token)
    await checks.sweep()
    with pytest.raises(grpc.aio.AbortError):
        await reading
    assert cancelled.is_set() and not reading.cancelled()
    assert context.status is not None and context.status.code is grpc.StatusCode.UNAUTHENTICATED
    assert checks.open_streams == 0
