from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta

import pytest

from san_jobs.job_service.domain.backoff import BackoffPolicy, bounded_retry_after


def test_delay_doubles_within_jitter_band() -> None:
    policy = BackoffPolicy(base_delay=2.0, max_delay=300.0)
    rng = random.Random(1)
    for attempt, ceiling in [(1, 2.0), (2, 4.0), (3, 8.0), (4, 16.0)]:
        for _ in range(50):
            delay = policy.delay(attempt, rng=rng)
            assert ceiling / 2 <= delay <= ceiling


def test_delay_is_capped() -> None:
    policy = BackoffPolicy(base_delay=2.0, max_delay=300.0)
    assert all(150.0 <= policy.delay(40) <= 300.0 for _ in range(20))


def test_retry_info_is_a_floor() -> None:
    policy = BackoffPolicy(base_delay=0.1, max_delay=20.0)
    assert policy.delay(1, retry_after=12.0) == 12.0


@pytest.mark.parametrize("retry_after", [12.0, 2592000.0, 1e12, 2.0**63, math.inf])
def test_retry_info_is_clamped_to_the_max_delay(retry_after: float) -> None:
    policy = BackoffPolicy(base_delay=0.1, max_delay=1.0)
    assert policy.delay(1, retry_after=retry_after) == 1.0


@pytest.mark.parametrize("retry_after", [-5.0, -math.inf, math.nan])
def test_a_negative_or_nan_retry_info_is_no_floor(retry_after: float) -> None:
    policy = BackoffPolicy(base_delay=2.0, max_delay=300.0)
    assert 1.0 <= policy.delay(1, retry_after=retry_after) <= 2.0


def test_a_huge_max_delay_still_gives_a_valid_retry_time() -> None:
    policy = BackoffPolicy(base_delay=1e300, max_delay=1e300)
    delay = policy.delay(5, retry_after=math.inf)
    assert datetime.now(UTC) + timedelta(seconds=delay) > datetime.now(UTC)


def test_jitter_spreads_retries() -> None:
    policy = BackoffPolicy(base_delay=2.0, max_delay=300.0)
    rng = random.Random(7)
    delays = {round(policy.delay(3, rng=rng), 3) for _ in range(100)}
    assert len(delays) > 50


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [(None, 0.0), (float("nan"), 0.0), (-5.0, 0.0), (2.5, 2.5), (30 * 86400.0, 300.0)],
)
def test_a_rate_limit_pause_is_bounded_like_a_retry(
    retry_after: float | None, expected: float
) -> None:
    # The breaker pauses a job type for the RetryInfo delay: a hostile or broken
    # answer of 30 days must not stop the type for longer than --retry-max-delay.
    assert bounded_retry_after(retry_after, 300.0) == expected
    assert bounded_retry_after(float("inf"), 300.0) == 300.0
