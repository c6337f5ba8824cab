"""Fault injection: reproduce a bad day (slow model, outage, 429 burst, garbage answers).

Off by default. Every injected fault is raised as the same exception a real failure
raises, so callers see the same status code and details; only the message says
"(injected fault)".
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass

from san_jobs.ai_gateway.errors import (
    BackendUnavailable,
    MalformedResponse,
    RateLimited,
    json_error_message,
)

# A model answer cut short mid-list, the typical shape of a truncated LLM reply. Parsing
# it for real gives the same kind of message a real malformed answer gets.
_BROKEN_ANSWER = '{\n  "summary": "A short summary.",\n  "tags": [\n    "alpha",,\n  ]\n}'


@dataclass(frozen=True)
class FaultConfig:
    """What to inject; all zero means nothing is injected."""

    latency: float = 0.0
    unavailable_rate: float = 0.0
    rate_limit_rate: float = 0.0
    malformed_rate: float = 0.0
    retry_delay: float = 1.0
    seed: int | None = None

    @property
    def enabled(self) -> bool:
        """Whether any fault is configured."""
        return (
            self.latency > 0
            or self.unavailable_rate > 0
            or self.rate_limit_rate > 0
            or self.malformed_rate > 0
        )

    def describe(self) -> str:
        """A one-line description for the startup warning."""
        return (
            f"latency={self.latency:g}s unavailable_rate={self.unavailable_rate:g} "
            f"rate_limit_rate={self.rate_limit_rate:g} malformed_rate={self.malformed_rate:g} "
            f"seed={self.seed}"
        )


class FaultInjector:
    """Draws faults from a seeded generator, in a fixed order per call."""

    def __init__(self, config: FaultConfig) -> None:
        self.config = config
        self._rng = random.Random(config.seed)

    async def before_backend(self) -> None:
        """Sleep the injected latency, then maybe raise one injected failure.

        The three draws happen on every call (whatever the rates) so a given seed gives
        the same sequence of outcomes however the rates are combined.
        """
        cfg = self.config
        if not cfg.enabled:
            return
        unavailable = self._rng.random() < cfg.unavailable_rate
        limited = self._rng.random() < cfg.rate_limit_rate
        malformed = self._rng.random() < cfg.malformed_rate
        if cfg.latency > 0:
            await asyncio.sleep(cfg.latency)
        if unavailable:
            raise BackendUnavailable("backend unavailable (injected fault)")
        if limited:
            raise RateLimited(
                "upstream rate limit exceeded (injected fault)",
                retry_delay=cfg.retry_delay,
                subject="backend",
                description="upstream model rate limit",
                metadata={"limit": "upstream"},
            )
        if malformed:
            raise MalformedResponse(f"{_broken_answer_message()} (injected fault)")


def _broken_answer_message() -> str:
    try:
        json.loads(_BROKEN_ANSWER)
    except json.JSONDecodeError as err:
        return json_error_message(err)
    raise AssertionError("the broken answer parsed")  # pragma: no cover
