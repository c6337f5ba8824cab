"""Per-caller token buckets and a cap on work in flight.

Both limits answer at once instead of queueing: a caller that is over its rate, or a
gateway that is full, gets ``RESOURCE_EXHAUSTED`` with the time after which trying again
makes sense. Queueing would only move the wait into the caller's deadline.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from san_jobs.ai_gateway.errors import RateLimited

Clock = Callable[[], float]


@dataclass
class TokenBucket:
    """A classic token bucket: ``rate`` tokens per second, at most ``burst`` kept."""

    rate: float
    burst: float
    tokens: float
    updated: float

    def try_take(self, now: float) -> float:
        """Take one token; return 0.0 on success, else the seconds until one is available."""
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate

    def is_full(self, now: float) -> bool:
        """True when the bucket would be at ``burst`` now (its caller has been idle)."""
        return self.tokens + (now - self.updated) * self.rate >= self.burst


class RateLimiter:
    """One token bucket per caller key; ``rate`` 0 means unlimited."""

    # Idle (full) buckets carry no information; drop them once the table grows past this.
    _PRUNE_AT = 10_000

    def __init__(self, rate: float, burst: int, clock: Clock = time.monotonic) -> None:
        self.rate = rate
        # burst 0 means "one second's worth", and never less than one request.
        self.burst = float(burst) if burst > 0 else float(max(1, math.ceil(rate)))
        self._clock = clock
        self._buckets: dict[str, TokenBucket] = {}

    @property
    def enabled(self) -> bool:
        """Whether any limit applies."""
        return self.rate > 0

    def check(self, caller: str) -> None:
        """Spend one request of ``caller``'s budget, or raise :class:`RateLimited`."""
        if not self.enabled:
            return
        now = self._clock()
        bucket = self._buckets.get(caller)
        if bucket is None:
            if len(self._buckets) >= self._PRUNE_AT:
                self._prune(now)
            bucket = TokenBucket(self.rate, self.burst, self.burst, now)
            self._buckets[caller] = bucket
        wait = bucket.try_take(now)
        if wait > 0:
            raise RateLimited(
                f"rate limit exceeded for caller {caller!r}: "
                f"{self.rate:g} requests/second, burst {self.burst:g}",
                retry_delay=wait,
                subject=f"client:{caller}",
                description=f"{self.rate:g} requests per second (burst {self.burst:g})",
                metadata={"clientId": caller, "limit": "rate"},
            )

    def _prune(self, now: float) -> None:
        for key in [k for k, b in self._buckets.items() if b.is_full(now)]:
            del self._buckets[key]


class ConcurrencyLimiter:
    """At most ``limit`` calls doing backend work at once; the rest are refused."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0
        # A running average of call time is the honest guess for "when will a slot free".
        self._avg_seconds = 0.05

    @contextmanager
    def slot(self, clock: Clock = time.monotonic) -> Iterator[None]:
        """Hold one slot for the duration of the block, or raise :class:`RateLimited`."""
        if self.in_flight >= self.limit:
            raise RateLimited(
                f"gateway busy: {self.in_flight} calls in flight (max {self.limit})",
                retry_delay=max(0.01, self._avg_seconds),
                subject="gateway:concurrency",
                description=f"at most {self.limit} calls in flight",
                metadata={"limit": "concurrency"},
            )
        self.in_flight += 1
        start = clock()
        try:
            yield
        finally:
            self.in_flight -= 1
            self._avg_seconds = 0.8 * self._avg_seconds + 0.2 * (clock() - start)
