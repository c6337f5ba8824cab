"""The fallback backend and the primary's circuit (san_jobs/ai_gateway/fallback.py): which
backend serves a call, when the primary is skipped, probed, and trusted again."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from pydantic import ValidationError

from san_jobs.ai_gateway.backends.base import Backend
from san_jobs.ai_gateway.backends.instant import InstantBackend
from san_jobs.ai_gateway.backends.local.backend import LocalBackend
from san_jobs.ai_gateway.errors import (
    BackendUnavailable,
    DeadlineExceeded,
    GatewayError,
    InvalidRequest,
    MalformedResponse,
    RateLimited,
    TokenLimitExceeded,
)
from san_jobs.ai_gateway.fallback import Fallback, PrimaryCircuit
from san_jobs.ai_gateway.models import EmbedInput, EmbedResult
from san_jobs.ai_gateway.server import make_fallback
from san_jobs.ai_gateway.settings import GatewaySettings
from san_jobs.shared.field_violation import FieldViolation


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Scripted:
    """A backend whose embed answers, or raises, what it is told; counts its calls."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls = 0
        self.failure: BaseException | None = None
        self.hang = False
        self.entered = asyncio.Event()  # set when a call reaches it
        self.time_left: list[float | None] = []

    async def embed(self, request: EmbedInput, time_left: float | None) -> EmbedResult:
        self.calls += 1
        self.entered.set()
        self.time_left.append(time_left)
        if self.hang:
            await asyncio.Event().wait()
        if self.failure is not None:
            raise self.failure
        return EmbedResult([1.0], self.name)


async def _embed(backend: Backend, time_left: float | None) -> EmbedResult:
    return await backend.embed(EmbedInput("text"), time_left)


def _fallback(
    clock: FakeClock, failures: int = 3, cooldown: float = 30.0, reserve: float = 1.0
) -> tuple[Fallback, Scripted, Scripted]:
    primary, spare = Scripted("primary-model"), Scripted("spare-model")
    circuit = PrimaryCircuit("primary", failures=failures, cooldown=cooldown, clock=clock)
    # The fallback's own clock is the real one: only the circuit's is faked.
    return Fallback(primary, spare, circuit, reserve=reserve), primary, spare  # type: ignore[arg-type]


async def _serve(fallback: Fallback) -> str:
    result, _ = await fallback.serve(_embed, None)
    return result.model


async def test_the_primary_serves_while_it_answers() -> None:
    fallback, primary, spare = _fallback(FakeClock())
    assert [await _serve(fallback) for _ in range(5)] == ["primary-model"] * 5
    assert (primary.calls, spare.calls) == (5, 0)


@pytest.mark.parametrize(
    "failure",
    [BackendUnavailable("backend unavailable: HTTP 503"), DeadlineExceeded("too slow")],
)
async def test_a_transient_failure_is_served_by_the_fallback(failure: GatewayError) -> None:
    fallback, primary, _ = _fallback(FakeClock())
    primary.failure = failure
    result, by_fallback = await fallback.serve(_embed, None)
    assert (result.model, by_fallback) == ("spare-model", True)
    assert primary.calls == 1


@pytest.mark.parametrize(
    "failure",
    [
        InvalidRequest([FieldViolation("text", "must not be empty")]),
        TokenLimitExceeded(9001, 8192),
        MalformedResponse("JSON Parse Error"),
        RateLimited("slow down", retry_delay=2.0, subject="backend", description="upstream"),
    ],
)
async def test_a_permanent_error_of_the_primary_is_the_answer(failure: GatewayError) -> None:
    fallback, primary, spare = _fallback(FakeClock(), failures=1)
    primary.failure = failure
    with pytest.raises(type(failure)):
        await fallback.serve(_embed, None)
    assert spare.calls == 0
    assert not fallback.circuit.is_open  # it answered: it is up


async def test_the_circuit_opens_after_failures_in_a_row_and_skips_the_primary(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    fallback, primary, spare = _fallback(clock, failures=3, cooldown=30.0)
    primary.failure = BackendUnavailable("backend unavailable: HTTP 503")
    caplog.set_level(logging.INFO, logger="ai_gateway.fallback")
    for _ in range(3):
        assert await _serve(fallback) == "spare-model"
    assert fallback.circuit.is_open
    opened = [r.getMessage() for r in caplog.records if "circuit open" in r.getMessage()]
    assert opened == [
        "primary backend primary circuit open after 3 transient failures in a row (last: "
        "backend unavailable: HTTP 503); calls go to the fallback, the primary is tried "
        "again in 30.0 s"
    ]
    clock.now += 29.9
    for _ in range(10):
        assert await _serve(fallback) == "spare-model"
    assert (primary.calls, spare.calls) == (3, 13)  # skipped while open


async def test_a_success_between_failures_resets_the_count() -> None:
    fallback, primary, _ = _fallback(FakeClock(), failures=3)
    for _ in range(4):
        primary.failure = BackendUnavailable("down")
        await _serve(fallback)
        await _serve(fallback)
        primary.failure = None
        assert await _serve(fallback) == "primary-model"
    assert not fallback.circuit.is_open


async def test_after_the_cooldown_one_probe_tries_the_primary_and_closes_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    fallback, primary, _ = _fallback(clock, failures=1, cooldown=30.0)
    primary.failure = BackendUnavailable("down")
    await _serve(fallback)
    assert fallback.circuit.is_open
    clock.now += 30.0
    primary.failure = None
    caplog.set_level(logging.INFO, logger="ai_gateway.fallback")
    assert await _serve(fallback) == "primary-model"
    assert not fallback.circuit.is_open
    closed = [r.getMessage() for r in caplog.records if "circuit closed" in r.getMessage()]
    assert closed == [
        "primary backend primary circuit closed: it answered again after 30.0 s of "
        "failures; calls go to it again"
    ]


async def test_a_failed_probe_opens_the_circuit_for_another_cooldown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    fallback, primary, _ = _fallback(clock, failures=2, cooldown=10.0)
    primary.failure = BackendUnavailable("down")
    await _serve(fallback)
    caplog.set_level(logging.INFO, logger="ai_gateway.fallback")
    await _serve(fallback)
    clock.now += 10.0
    assert await _serve(fallback) == "spare-model"  # the probe failed
    assert primary.calls == 3
    clock.now += 9.0
    await _serve(fallback)
    assert primary.calls == 3  # a new cooldown from the probe's failure
    clock.now += 1.0
    await _serve(fallback)
    assert primary.calls == 4
    # One line when it opened; none for a probe that found it still down.
    assert len([r for r in caplog.records if "circuit open" in r.getMessage()]) == 1


async def test_only_one_probe_at_a_time_and_a_cancelled_probe_frees_the_turn() -> None:
    clock = FakeClock()
    fallback, primary, spare = _fallback(clock, failures=1, cooldown=5.0)
    primary.failure = BackendUnavailable("down")
    await _serve(fallback)
    clock.now += 5.0
    primary.failure = None
    primary.hang = True
    primary.entered.clear()
    probe = asyncio.create_task(_serve(fallback))
    await primary.entered.wait()  # the probe is with the primary
    async with asyncio.timeout(5):  # a second call stuck with the primary fails here
        assert await _serve(fallback) == "spare-model"  # others do not pile onto it
    assert primary.calls == 2
    probe.cancel()
    with pytest.raises(asyncio.CancelledError):
        await probe
    primary.hang = False
    assert await _serve(fallback) == "primary-model"  # the next call probes
    assert not fallback.circuit.is_open
    assert spare.calls == 2


async def test_the_deadline_covers_both_tries() -> None:
    fallback, primary, spare = _fallback(FakeClock(), reserve=1.0)
    primary.hang = True  # a primary that ignores its time left
    deadline = time.monotonic() + 1.6
    result, by_fallback = await fallback.serve(_embed, deadline)
    assert (result.model, by_fallback) == ("spare-model", True)
    # The primary got the call's time less the reserve, but at least half of it.
    (primary_left,) = primary.time_left
    assert primary_left is not None and 0.7 < primary_left <= 0.8
    (spare_left,) = spare.time_left
    assert spare_left is not None and 0.0 < spare_left <= 0.9
    assert time.monotonic() < deadline


async def test_without_a_deadline_the_primary_is_not_cut_short() -> None:
    fallback, primary, _ = _fallback(FakeClock())
    await _serve(fallback)
    assert primary.time_left == [None]


def test_the_settings_build_the_fallback_and_refuse_the_primary_as_its_own_fallback() -> None:
    settings = GatewaySettings(
        backend="instant", fallback_backend="local", primary_failures=4, fallback_cooldown=9.0
    )
    fallback = make_fallback(settings, InstantBackend())
    assert fallback is not None
    assert (fallback.primary.name, fallback.fallback.name) == ("instant", "local")
    assert (fallback.circuit.failures, fallback.circuit.cooldown) == (4, 9.0)
    assert make_fallback(GatewaySettings(), LocalBackend()) is None
    with pytest.raises(ValidationError, match="the fallback backend must differ from --backend"):
        GatewaySettings(backend="local", fallback_backend="local")
