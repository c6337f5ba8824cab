"""Retry delays: exponential backoff with jitter, never sooner than the gateway asks,
never later than the configured maximum."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

# No retry waits longer than this, whatever --retry-max-delay says: the retry time
# (now + delay) must stay a valid datetime.
LONGEST_DELAY_SECONDS = 366 * 24 * 3600.0


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    base_delay: float = 2.0
    max_delay: float = 300.0

    def delay(
        self,
        attempt: int,
        retry_after: float | None = None,
        rng: random.Random | None = None,
    ) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based).

        The ceiling doubles each attempt up to `max_delay`; the delay is drawn from
        [ceiling/2, ceiling] ("equal jitter"), so retries of many jobs that failed
        together spread out but still back off. A gateway's RetryInfo is a floor,
        but an untrusted one: it is clamped to [0, max_delay] (a negative or NaN
        delay counts as none, an infinite one as max_delay), so the result is
        always finite and never above `max_delay`.
        """
        longest = min(max(self.max_delay, 0.0), LONGEST_DELAY_SECONDS)
        exponent = max(attempt - 1, 0)
        ceiling = min(longest, self.base_delay * (2.0 ** min(exponent, 32)))
        draw = (rng or random).uniform(ceiling / 2.0, ceiling)
        return min(max(draw, _floor(retry_after)), longest)


def bounded_retry_after(retry_after: float | None, longest: float) -> float:
    """A gateway's RetryInfo delay made safe to wait for: NaN, negative or absent
    count as none, and nothing waits longer than `longest` (a hostile or broken
    answer of 30 days must not stop a job type for 30 days)."""
    return min(_floor(retry_after), min(max(longest, 0.0), LONGEST_DELAY_SECONDS))


def _floor(retry_after: float | None) -> float:
    """A RetryInfo delay as a usable floor: NaN, negative or absent mean none."""
    if retry_after is None or math.isnan(retry_after):
        return 0.0
    return max(retry_after, 0.0)
