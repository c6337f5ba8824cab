import pytest

from san_jobs.ai_gateway.errors import (
    BackendUnavailable,
    GatewayError,
    MalformedResponse,
    RateLimited,
)
from san_jobs.ai_gateway.faults import FaultConfig, FaultInjector


async def _outcomes(config: FaultConfig, n: int) -> list[str]:
    injector = FaultInjector(config)
    seen = []
    for _ in range(n):
        try:
            await injector.before_backend()
            seen.append("ok")
        except GatewayError as err:
            seen.append(type(err).__name__)
    return seen


async def test_off_by_default() -> None:
    assert not FaultConfig().enabled
    assert await _outcomes(FaultConfig(), 20) == ["ok"] * 20


async def test_seeded_runs_repeat_exactly() -> None:
    config = FaultConfig(unavailable_rate=0.3, rate_limit_rate=0.2, malformed_rate=0.2, seed=7)
    first = await _outcomes(config, 200)
    assert first == await _outcomes(config, 200)
    assert {"ok", "BackendUnavailable", "RateLimited", "MalformedResponse"} == set(first)
    # Roughly the configured share of outages.
    assert 35 <= first.count("BackendUnavailable") <= 85


async def test_full_outage_and_messages() -> None:
    injector = FaultInjector(FaultConfig(unavailable_rate=1.0, seed=1))
    with pytest.raises(BackendUnavailable, match=r"^backend unavailable \(injected fault\)$"):
        await injector.before_backend()
    limited = FaultInjector(FaultConfig(rate_limit_rate=1.0, retry_delay=2.5))
    with pytest.raises(RateLimited) as caught:
        await limited.before_backend()
    assert caught.value.retry_delay == 2.5
    broken = FaultInjector(FaultConfig(malformed_rate=1.0))
    with pytest.raises(MalformedResponse, match=r"^JSON Parse Error at line 4, column \d+"):
        await broken.before_backend()


async def test_latency_is_applied() -> None:
    import time

    injector = FaultInjector(FaultConfig(latency=0.05))
    start = time.perf_counter()
    await injector.before_backend()
    assert time.perf_counter() - start >= 0.045
