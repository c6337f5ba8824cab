"""The result cache (LRU, time to live), identical calls in flight sharing one backend
call, and both in the gateway's dispatch (san_jobs/ai_gateway/result_cache.py, coalesce.py,
gateway.py)."""

from __future__ import annotations

import asyncio
import time

import pytest

from san_jobs.ai_gateway.backends.base import Backend
from san_jobs.ai_gateway.coalesce import InFlightCalls
from san_jobs.ai_gateway.errors import BackendUnavailable, DeadlineExceeded
from san_jobs.ai_gateway.fallback import Fallback, PrimaryCircuit
from san_jobs.ai_gateway.faults import FaultConfig, FaultInjector
from san_jobs.ai_gateway.gateway import CallInfo, Gateway
from san_jobs.ai_gateway.limits import ConcurrencyLimiter, RateLimiter
from san_jobs.ai_gateway.models import EmbedInput, EmbedResult
from san_jobs.ai_gateway.result_cache import CacheKey, ResultCache, cache_key, input_digest
from san_jobs.ai_gateway.usage import Usage


class FakeClock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def _key(name: str) -> CacheKey:
    return cache_key("Embed", "model", EmbedInput(name))


# The cache on its own.


def test_equal_inputs_have_one_key_and_any_difference_another() -> None:
    assert input_digest(EmbedInput("a b")) == input_digest(EmbedInput("a b"))
    assert input_digest(EmbedInput("a b")) != input_digest(EmbedInput("a  b"))
    assert len(input_digest(EmbedInput("x"))) == 64  # SHA-256, hex
    base = cache_key("Embed", "m1", EmbedInput("x"))
    assert base == cache_key("Embed", "m1", EmbedInput("x"))
    assert base != cache_key("AnalyzeContent", "m1", EmbedInput("x"))
    assert base != cache_key("Embed", "m2", EmbedInput("x"))


def test_the_least_recently_used_answer_leaves_first() -> None:
    cache = ResultCache(2, 60.0, FakeClock())
    cache.put(_key("a"), "A")
    cache.put(_key("b"), "B")
    assert cache.get(_key("a")) == "A"  # now b is the least recently used
    cache.put(_key("c"), "C")
    assert (cache.get(_key("a")), cache.get(_key("b")), cache.get(_key("c"))) == ("A", None, "C")
    assert len(cache) == 2


def test_an_answer_expires_after_its_time_to_live() -> None:
    clock = FakeClock()
    cache = ResultCache(10, 60.0, clock)
    cache.put(_key("a"), "A")
    clock.now += 59.9
    assert cache.get(_key("a")) == "A"  # reading does not extend its life
    clock.now += 0.1
    assert cache.get(_key("a")) is None
    assert len(cache) == 0


def test_zero_entries_keeps_nothing() -> None:
    cache = ResultCache(0, 60.0)
    assert not cache.enabled
    cache.put(_key("a"), "A")
    assert cache.get(_key("a")) is None


# Identical calls in flight.


class Gate:
    """A shared call that waits until released, counting how often it was started."""

    def __init__(self) -> None:
        self.started = 0
        self.cancelled = 0
        self.entered = asyncio.Event()  # set when a call starts
        self.ended = asyncio.Event()  # set when a call is cancelled
        self.release = asyncio.Event()
        self.failure: Exception | None = None

    async def work(self) -> str:
        self.started += 1
        self.entered.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            self.ended.set()
            raise
        if self.failure is not None:
            raise self.failure
        return "answer"


async def test_concurrent_identical_calls_share_one_call() -> None:
    coalescer, gate = InFlightCalls(), Gate()
    waiters = [asyncio.create_task(coalescer.run("k", gate.work)) for _ in range(5)]
    await gate.entered.wait()
    gate.release.set()
    outcomes = await asyncio.gather(*waiters)
    assert outcomes == [("answer", False)] + [("answer", True)] * 4
    assert gate.started == 1
    assert len(coalescer) == 0  # forgotten once done


async def test_every_waiter_gets_the_shared_error() -> None:
    coalescer, gate = InFlightCalls(), Gate()
    gate.failure = BackendUnavailable("down")
    waiters = [asyncio.create_task(coalescer.run("k", gate.work)) for _ in range(3)]
    await gate.entered.wait()
    gate.release.set()
    outcomes = await asyncio.gather(*waiters, return_exceptions=True)
    assert [type(o) for o in outcomes] == [BackendUnavailable] * 3


async def test_a_waiter_that_leaves_does_not_cancel_the_others() -> None:
    coalescer, gate = InFlightCalls(), Gate()
    first = asyncio.create_task(coalescer.run("k", gate.work))
    second = asyncio.create_task(coalescer.run("k", gate.work))
    await gate.entered.wait()
    first.cancel()  # the one that started it goes away
    with pytest.raises(asyncio.CancelledError):
        await first
    gate.release.set()
    assert await second == ("answer", True)
    assert gate.cancelled == 0


async def test_the_shared_call_is_cancelled_when_its_last_waiter_leaves() -> None:
    coalescer, gate = InFlightCalls(), Gate()
    waiters = [asyncio.create_task(coalescer.run("k", gate.work)) for _ in range(2)]
    await gate.entered.wait()
    for waiter in waiters:
        waiter.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    async with asyncio.timeout(5):  # a shared call left running fails here
        await gate.ended.wait()
    assert gate.cancelled == 1
    assert len(coalescer) == 0
    # A caller arriving afterwards starts afresh, not into the cancelled call.
    gate.entered.clear()
    again = asyncio.create_task(coalescer.run("k", gate.work))
    await gate.entered.wait()
    assert gate.started == 2
    gate.release.set()
    assert await again == ("answer", False)


# In the gateway.


class CountingBackend:
    """Embeds anything; counts calls; can be held, or fail."""

    def __init__(self, name: str = "primary-model") -> None:
        self.name = name
        self.calls = 0
        self.entered = asyncio.Event()  # set when a call reaches the backend
        self.hold: asyncio.Event | None = None
        self.failure: Exception | None = None

    async def embed(self, request: EmbedInput, time_left: float | None) -> EmbedResult:
        self.calls += 1
        self.entered.set()
        if self.hold is not None:
            await self.hold.wait()
        if self.failure is not None:
            raise self.failure
        usage = Usage(self.name, 7, 0, 0.5)
        return EmbedResult([1.0], self.name, usage)


def _gateway(
    backend: CountingBackend, entries: int = 10, fallback: Fallback | None = None
) -> Gateway:
    return Gateway(
        backend,  # type: ignore[arg-type]
        max_input_tokens=8192,
        rate_limiter=RateLimiter(0, 0),
        concurrency=ConcurrencyLimiter(8),
        faults=FaultInjector(FaultConfig()),
        min_deadline=0.0,
        fallback=fallback,
        cache=ResultCache(entries, 60.0),
        model="primary-model",
    )


async def _embed_call(gateway: Gateway, text: str, remaining: float | None = None) -> EmbedResult:
    data = EmbedInput(text)

    async def work(backend: Backend, time_left: float | None) -> EmbedResult:
        return await backend.embed(data, time_left)

    return await gateway.run(CallInfo("Embed", "caller"), 1, remaining, work, key=data)


CACHED = Usage("primary-model", 0, 0, 0.0, cached=True)


async def test_the_second_identical_call_is_answered_from_the_cache() -> None:
    backend = CountingBackend()
    gateway = _gateway(backend)
    first = await _embed_call(gateway, "same")
    second = await _embed_call(gateway, "same")
    assert backend.calls == 1
    assert first.usage == Usage("primary-model", 7, 0, 0.5)
    assert second.usage == CACHED
    assert second.vector == first.vector
    await _embed_call(gateway, "other")
    assert backend.calls == 2


async def test_with_the_cache_off_every_call_reaches_the_backend() -> None:
    backend = CountingBackend()
    gateway = _gateway(backend, entries=0)
    for _ in range(3):
        assert (await _embed_call(gateway, "same")).usage == Usage("primary-model", 7, 0, 0.5)
    assert backend.calls == 3


async def test_errors_are_not_cached() -> None:
    backend = CountingBackend()
    backend.failure = BackendUnavailable("down")
    gateway = _gateway(backend)
    with pytest.raises(BackendUnavailable):
        await _embed_call(gateway, "same")
    backend.failure = None
    assert (await _embed_call(gateway, "same")).usage == Usage("primary-model", 7, 0, 0.5)
    assert backend.calls == 2


async def test_joined_calls_are_marked_cached_and_reach_the_backend_once() -> None:
    backend = CountingBackend()
    backend.hold = asyncio.Event()
    gateway = _gateway(backend)
    calls = [asyncio.create_task(_embed_call(gateway, "same", 5.0)) for _ in range(3)]
    await backend.entered.wait()
    backend.hold.set()
    usages = [result.usage for result in await asyncio.gather(*calls)]
    assert usages == [Usage("primary-model", 7, 0, 0.5), CACHED, CACHED]
    assert backend.calls == 1


async def test_a_waiter_whose_deadline_passes_leaves_the_others_their_answer() -> None:
    backend = CountingBackend()
    backend.hold = asyncio.Event()
    gateway = _gateway(backend)
    patient = asyncio.create_task(_embed_call(gateway, "same", 30.0))
    await backend.entered.wait()
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        await _embed_call(gateway, "same", 0.2)  # joins, then leaves at its own deadline
    assert time.monotonic() - started < 5.0
    backend.hold.set()
    assert (await patient).usage == Usage("primary-model", 7, 0, 0.5)
    assert backend.calls == 1


async def test_the_fallbacks_answers_are_not_cached() -> None:
    primary, spare = CountingBackend(), CountingBackend("spare-model")
    primary.failure = BackendUnavailable("down")
    circuit = PrimaryCircuit("primary", failures=5, cooldown=30.0)
    gateway = _gateway(primary, fallback=Fallback(primary, spare, circuit, reserve=0.0))  # type: ignore[arg-type]
    assert (await _embed_call(gateway, "same")).model == "spare-model"
    primary.failure = None
    assert (await _embed_call(gateway, "same")).usage == Usage("primary-model", 7, 0, 0.5)
    assert (await _embed_call(gateway, "same")).usage == CACHED
    assert (primary.calls, spare.calls) == (2, 1)
