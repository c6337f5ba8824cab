"""--max-pending-per-caller: how many PENDING jobs one authenticated caller may have
(ready, delayed up to a year ahead, or waiting for dependencies), all instances
together (issue 42, point 6). Without it one tenant could fill the table with jobs
delayed 300 days, or waiting on a job that never ends, and every claim, count and
index would carry them.

The count is the database's (JobQueries.pending_count, stopped at the cap), read again
when this instance's copy is REFRESH_SECONDS old; between two reads the jobs this
instance enqueued for the caller are added to it. So the cap holds within what the
other instances enqueue in a few seconds, for one count every few seconds per active
caller instead of one per Enqueue. A caller near its cap is counted again before it is
refused: its jobs may have run since the last count.

Under --auth off there is no caller to count (every job's tenant is ""), and no cap.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from san_jobs.job_service.domain.errors import QuotaExceededError
from san_jobs.job_service.domain.ports import PendingCountParams

CAP_NAME = "max-pending-per-caller"
REFRESH_SECONDS = 5.0
# At most this many callers' counts are kept (the oldest read is forgotten first).
MAX_CALLERS_KEPT = 10_000


@dataclass(slots=True)
class _Count:
    counted: int
    read_at: float
    added: int = 0


class PendingQuota:
    def __init__(
        self,
        count: Callable[[PendingCountParams], Awaitable[int]],
        limit: int,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """`count`: JobQueries.pending_count."""
        self._count = count
        self.limit = limit
        self._monotonic = monotonic
        self._counts: dict[str, _Count] = {}

    async def room(self, tenant: str) -> int:
        """How many more PENDING jobs `tenant` may have now (0: none)."""
        if not tenant:
            return self.limit  # --auth off: no caller to count
        entry = self._counts.get(tenant)
        now = self._monotonic()
        if entry is None or now - entry.read_at >= REFRESH_SECONDS:
            entry = await self._read(tenant, now)
        left = self.limit - entry.counted - entry.added
        if left <= 0 and entry.read_at != now:
            # Near the cap on an estimate: count again (its jobs may have run since).
            entry = await self._read(tenant, now)
            left = self.limit - entry.counted
        return max(left, 0)

    async def check(self, tenant: str, adding: int = 1) -> None:
        """QuotaExceededError if `tenant` may not have `adding` more PENDING jobs."""
        if adding > await self.room(tenant):
            raise self.refusal(tenant)

    def refusal(self, tenant: str) -> QuotaExceededError:
        return QuotaExceededError(
            CAP_NAME,
            self.limit,
            tenant,
            f"{tenant} has {self.limit} jobs PENDING already ({CAP_NAME}); enqueue more"
            " once some have run",
        )

    def added(self, tenant: str, count: int) -> None:
        """`count` jobs of `tenant` were stored PENDING by this instance."""
        entry = self._counts.get(tenant)
        if entry is not None:
            entry.added += count

    async def _read(self, tenant: str, now: float) -> _Count:
        counted = await self._count(PendingCountParams(tenant=tenant, at_most=self.limit + 1))
        if tenant not in self._counts and len(self._counts) >= MAX_CALLERS_KEPT:
            oldest = min(self._counts, key=lambda name: self._counts[name].read_at)
            del self._counts[oldest]
        entry = self._counts[tenant] = _Count(counted, now)
        return entry
