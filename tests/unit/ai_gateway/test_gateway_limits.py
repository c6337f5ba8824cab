import pytest

from san_jobs.ai_gateway.errors import RateLimited
from san_jobs.ai_gateway.limits import ConcurrencyLimiter, RateLimiter


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bucket_allows_burst_then_reports_time_to_next_token() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rate=2.0, burst=3, clock=clock)
    for _ in range(3):
        limiter.check("a")
    with pytest.raises(RateLimited) as caught:
        limiter.check("a")
    assert caught.value.retry_delay == pytest.approx(0.5)
    assert caught.value.subject == "client:a"
    clock.now += 0.2
    with pytest.raises(RateLimited) as caught:
        limiter.check("a")
    assert caught.value.retry_delay == pytest.approx(0.3)
    clock.now += 0.3
    limiter.check("a")  # one token refilled


def test_buckets_are_per_caller() -> None:
    limiter = RateLimiter(rate=1.0, burst=1, clock=FakeClock())
    limiter.check("a")
    limiter.check("b")
    with pytest.raises(RateLimited):
        limiter.check("a")


def test_zero_rate_is_unlimited_and_default_burst() -> None:
    limiter = RateLimiter(rate=0.0, burst=0)
    for _ in range(1000):
        limiter.check("a")
    assert RateLimiter(rate=5.5, burst=0).burst == 6
    assert RateLimiter(rate=0.2, burst=0).burst == 1


def test_concurrency_slots() -> None:
    limiter = ConcurrencyLimiter(2)
    with limiter.slot(), limiter.slot():
        assert limiter.in_flight == 2
        with pytest.raises(RateLimited) as caught, limiter.slot():
            pass
        assert caught.value.retry_delay > 0
        assert caught.value.metadata["limit"] == "concurrency"
    assert limiter.in_flight == 0
    with limiter.slot():
        assert limiter.in_flight == 1
