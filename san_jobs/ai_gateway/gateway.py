"""What happens to every call before and around the backend, in order:

1. token limit (cheap, deterministic: refuse before any work);
2. deadline fail-fast (not enough time left for the backend to be useful);
3. the caller's rate limit (token bucket per authenticated caller);
4. the concurrency cap;
5. the result cache, then identical calls in flight (when configured: a cached or
   shared answer is marked so in its usage, with 0 tokens);
6. fault injection (when configured), then the backend (the primary, or the fallback
   when the primary fails transiently or its circuit is open: san_jobs/ai_gateway/fallback.py),
   all bounded by the deadline.

This module knows nothing of gRPC (tests/unit/ai_gateway/test_gateway_layers.py holds
it to that); the servicer supplies the caller's identity and remaining time, and the
transport maps the errors raised here (san_jobs/ai_gateway/transport_errors.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass
from typing import Any, TypeVar

from san_jobs.ai_gateway.backends.base import Backend
from san_jobs.ai_gateway.coalesce import InFlightCalls
from san_jobs.ai_gateway.errors import DeadlineExceeded, TokenLimitExceeded
from san_jobs.ai_gateway.fallback import Fallback, Work
from san_jobs.ai_gateway.faults import FaultInjector
from san_jobs.ai_gateway.limits import ConcurrencyLimiter, RateLimiter
from san_jobs.ai_gateway.result_cache import CacheKey, ResultCache, cache_key
from san_jobs.ai_gateway.usage import Usage

T = TypeVar("T")


@dataclass(frozen=True)
class CallInfo:
    """Who is calling and about what.

    ``caller`` is the authenticated identity (see :mod:`san_jobs.ai_gateway.callers`): it keys
    the rate limit. ``client_label`` is what the caller says it is (``x-client-id``),
    untrusted, kept for the call record only.
    """

    method: str
    caller: str
    job_id: str | None = None
    attempt: int | None = None
    client_label: str | None = None
    # The W3C traceparent the call came with on a StreamCalls stream ("": none, so
    # its span is a new root); None for a unary call, whose RPC's span is current.
    traceparent: str | None = None


class Gateway:
    """Limits, deadlines, faults, the result cache and the fallback around one backend.

    ``fallback`` (None: the backend alone) serves calls the primary ``backend`` cannot;
    ``cache`` (None or disabled: none) keeps answers of the primary, keyed by method,
    ``model`` (what names the primary's models) and input; identical calls in flight
    share one backend call whenever the cache is on.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        max_input_tokens: int,
        rate_limiter: RateLimiter,
        concurrency: ConcurrencyLimiter,
        faults: FaultInjector,
        min_deadline: float,
        fallback: Fallback | None = None,
        cache: ResultCache | None = None,
        model: str | None = None,
    ) -> None:
        self.backend = backend
        self.max_input_tokens = max_input_tokens
        self.rate_limiter = rate_limiter
        self.concurrency = concurrency
        self.faults = faults
        self.min_deadline = min_deadline
        self.fallback = fallback
        self.cache = cache if cache is not None and cache.enabled else None
        self.model = model or backend.name
        self.in_flight = InFlightCalls()

    async def run(
        self,
        call: CallInfo,
        input_tokens: int,
        remaining: float | None,
        work: Work[T],
        *,
        key: object = None,
    ) -> T:
        """Apply the checks, then ``await work(backend, time_left)`` within the deadline.

        ``key``: the call's validated input, which identifies it for the result cache
        and the sharing of identical calls (None: the call is never cached nor shared).
        """
        if input_tokens > self.max_input_tokens:
            raise TokenLimitExceeded(input_tokens, self.max_input_tokens)
        if remaining is not None and remaining < self.min_deadline:
            raise DeadlineExceeded(
                f"deadline too short: {remaining:.3f} s left, "
                f"the backend needs at least {self.min_deadline:.3f} s"
            )
        self.rate_limiter.check(call.caller)
        cache_at = None
        if self.cache is not None and key is not None:
            cache_at = cache_key(call.method, self.model, key)
            kept: T | None = self.cache.get(cache_at)
            if kept is not None:
                return marked_cached(kept)
        deadline = None if remaining is None else time.monotonic() + remaining
        try:
            # The gRPC layer cancels us too when the deadline passes, but bounding the
            # work here makes the outcome (and its log line) DEADLINE_EXCEEDED for sure.
            async with asyncio.timeout(remaining):
                if cache_at is None:
                    return (await self._dispatch(work, deadline))[0]
                at = cache_at
                result, shared = await self.in_flight.run(
                    at, lambda: self._dispatch_and_keep(at, work, deadline)
                )
                return marked_cached(result) if shared else result
        except TimeoutError as err:
            raise DeadlineExceeded(
                f"deadline exceeded: the backend did not finish within {remaining:.3f} s"
            ) from err

    async def _dispatch_and_keep(self, key: CacheKey, work: Work[T], deadline: float | None) -> T:
        """One backend call shared by identical callers; its answer kept when the
        primary gave it (a fallback's answer stands in only until the primary is back)."""
        async with asyncio.timeout(None if deadline is None else deadline - time.monotonic()):
            result, by_fallback = await self._dispatch(work, deadline)
        if self.cache is not None and not by_fallback:
            self.cache.put(key, result)
        return result

    async def _dispatch(self, work: Work[T], deadline: float | None) -> tuple[T, bool]:
        """The backend work under a concurrency slot, fault injection first; and
        whether the fallback served it."""
        with self.concurrency.slot():
            await self.faults.before_backend()
            if self.fallback is not None:
                return await self.fallback.serve(work, deadline)
            # Injected latency used part of the budget: pass on what is left.
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            return await work(self.backend, left), False


def marked_cached(result: T) -> T:
    """``result`` as an answer that cost nothing: its usage says cached, 0 tokens (the
    duration is the call's own, stamped by the caller of the gateway)."""
    answer: Any = result
    return dataclasses.replace(  # type: ignore[no-any-return]
        answer, usage=Usage(answer.model, 0, 0, 0.0, cached=True)
    )
