"""Claim limits: how many jobs of one type may start per second, and run at once, across
every instance on one database (--rate-limit TYPE=N/s, --concurrency-limit TYPE=N).

They are applied when jobs are claimed, so jobs over a limit wait PENDING (uncharged)
instead of failing on the provider's 429s. The rate is a token bucket shared through
the database (table dispatch_limits): it refills at N tokens a second up to `burst`,
and each claimed job takes one. The concurrency limit compares the type's PROCESSING
jobs with N. The store applies both in one transaction that holds the type's bucket
row, so instances racing for the same type take turns (WorkerStore.claim_limited).

Types without a limit are claimed as before, by the one claim statement.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime

from san_jobs.job_service.domain.model import Claim

# When a concurrency limit is reached, the worker looks again this soon: the jobs that
# free a slot may run on another instance, whose completion does not wake this one.
CONCURRENCY_RECHECK_SECONDS = 0.1
# The shortest wait a rate limit asks for (a fraction of a token away is not "now").
MIN_RATE_WAIT_SECONDS = 0.005

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*s\s*$")


@dataclass(frozen=True, slots=True)
class TypeLimit:
    """The limits of one job type; None: that limit is not set."""

    per_second: float | None = None
    max_running: int | None = None

    @property
    def burst(self) -> float:
        """Tokens the bucket holds at most. In any one-second window at most `burst +
        per_second` jobs start, so the burst is a tenth of the rate (at least one job):
        20/s never starts more than 22 in a second, 10/s not more than 11."""
        assert self.per_second is not None
        return float(max(1, math.floor(self.per_second / 10)))


@dataclass(frozen=True, slots=True)
class LimitedClaim:
    """What WorkerStore.claim_limited took, and, when a limit stopped it short of the
    jobs asked for, how long until the limit may allow more (seconds; None: no limit
    held the claim back)."""

    claims: list[Claim] = field(default_factory=list)
    wait_seconds: float | None = None


def parse_rate(text: object) -> float:
    """'20/s' (or a bare number) -> 20.0; ValueError, one line, else."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        value = float(text)
    else:
        match = _RATE.match(str(text))
        if match is None:
            raise ValueError(f"expected N/s (job starts per second, e.g. 20/s), got {text!r}")
        value = float(match.group(1))
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"a rate must be above 0 jobs per second, got {text!r}")
    return value


def refilled(tokens: float, refilled_at: datetime, now: datetime, limit: TypeLimit) -> float:
    """The bucket's tokens at `now`: `tokens` at `refilled_at`, plus the rate since."""
    assert limit.per_second is not None
    elapsed = max(0.0, (now - refilled_at).total_seconds())
    return min(limit.burst, tokens + elapsed * limit.per_second)


@dataclass(frozen=True, slots=True)
class Allowance:
    """How many jobs of a type a claim may take now, and why not more."""

    jobs: int
    rate_bound: bool
    running_bound: bool


def allowance(want: int, limit: TypeLimit, tokens: float | None, running: int) -> Allowance:
    """Jobs a claim asking for `want` may take: no more than whole tokens in the bucket
    (`tokens`, None without a rate limit), nor than the free running slots."""
    by_rate = math.floor(tokens) if tokens is not None else want
    by_running = limit.max_running - running if limit.max_running is not None else want
    jobs = max(0, min(want, by_rate, by_running))
    return Allowance(jobs, jobs < want and by_rate == jobs, jobs < want and by_running == jobs)


def wait_after(
    taken: int, allowed: Allowance, tokens_left: float | None, limit: TypeLimit
) -> float | None:
    """After a claim that took `taken` of `allowed` jobs: seconds until a limit that held
    it back may allow more, or None when no limit did (it took every due job)."""
    if taken < allowed.jobs or not (allowed.rate_bound or allowed.running_bound):
        return None
    waits: list[float] = []
    if allowed.rate_bound and tokens_left is not None and limit.per_second is not None:
        waits.append(max(MIN_RATE_WAIT_SECONDS, (1.0 - tokens_left) / limit.per_second))
    if allowed.running_bound:
        waits.append(CONCURRENCY_RECHECK_SECONDS)
    return max(waits) if waits else None
