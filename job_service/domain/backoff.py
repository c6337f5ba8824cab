"""Retry delays: exponential backoff with jitter, never sooner than the gateway asks."""

from __future__ import annotations

import random
from dataclasses import dataclass


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
        together spread out but still back off. A gateway's RetryInfo is a floor.
        """
        exponent = max(attempt - 1, 0)
        ceiling = min(self.max_delay, self.base_delay * (2.0 ** min(exponent, 32)))
        draw = (rng or random).uniform(ceiling / 2.0, ceiling)
        return max(draw, retry_after or 0.0)
