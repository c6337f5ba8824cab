"""What happens to every call before and around the backend, in order:

1. token limit (cheap, deterministic: refuse before any work);
2. deadline fail-fast (not enough time left for the backend to be useful);
3. the caller's rate limit (token bucket per authenticated caller);
4. the concurrency cap;
5. fault injection (when configured), then the backend, both bounded by the deadline.

This module knows nothing of gRPC (tests/unit/ai_gateway/test_gateway_layers.py holds
it to that); the servicer supplies the caller's identity and remaining time, and the
transport maps the errors raised here (ai_gateway/transport_errors.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from ai_gateway.backends.base import Backend
from ai_gateway.errors import DeadlineExceeded, TokenLimitExceeded
from ai_gateway.faults import FaultInjector
from ai_gateway.limits import ConcurrencyLimiter, RateLimiter

T = TypeVar("T")


@dataclass(frozen=True)
class CallInfo:
    """Who is calling and about what.

    ``caller`` is the authenticated identity (see :mod:`ai_gateway.callers`): it keys
    the rate limit. ``client_label`` is what the caller says it is (``x-client-id``),
    untrusted, kept for the call record only.
    """

    method: str
    caller: str
    job_id: str | None = None
    attempt: int | None = None
    client_label: str | None = None


class Gateway:
    """Limits, deadlines and faults around one backend."""

    def __init__(
        self,
        backend: Backend,
        *,
        max_input_tokens: int,
        rate_limiter: RateLimiter,
        concurrency: ConcurrencyLimiter,
        faults: FaultInjector,
        min_deadline: float,
    ) -> None:
        self.backend = backend
        self.max_input_tokens = max_input_tokens
        self.rate_limiter = rate_limiter
        self.concurrency = concurrency
        self.faults = faults
        self.min_deadline = min_deadline

    async def run(
        self,
        call: CallInfo,
        input_tokens: int,
        remaining: float | None,
        work: Callable[[float | None], Awaitable[T]],
    ) -> T:
        """Apply the checks, then ``await work(remaining)`` within the deadline."""
        if input_tokens > self.max_input_tokens:
            raise TokenLimitExceeded(input_tokens, self.max_input_tokens)
        if remaining is not None and remaining < self.min_deadline:
            raise DeadlineExceeded(
                f"deadline too short: {remaining:.3f} s left, "
                f"the backend needs at least {self.min_deadline:.3f} s"
            )
        self.rate_limiter.check(call.caller)
        loop = asyncio.get_running_loop()
        deadline = None if remaining is None else loop.time() + remaining
        with self.concurrency.slot():
            try:
                # The gRPC layer cancels us too when the deadline passes, but bounding the
                # work here makes the outcome (and its log line) DEADLINE_EXCEEDED for sure.
                async with asyncio.timeout(remaining):
                    await self.faults.before_backend()
                    # Injected latency used part of the budget: pass on what is left.
                    left = None if deadline is None else max(0.0, deadline - loop.time())
                    return await work(left)
            except TimeoutError as err:
                raise DeadlineExceeded(
                    f"deadline exceeded: the backend did not finish within {remaining:.3f} s"
                ) from err
