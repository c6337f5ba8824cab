"""The dispatch pauses as the transport shows them, read from the store at most once a
second.

Every job conversion (GetJob, ListJobs, Enqueue, the streams) says whether a PENDING
job waits behind a pause of its type, so the pauses must not cost a store read per
job, nor per call: calls share one read, taken when the copy held is older than
`max_age`. Streams watching PENDING jobs also wait for the pause set to change
(`wait_for_change`): while any does, one poller re-reads the pauses every `max_age`,
so an open or a close shows on those streams within about two `max_age`.

Shown are the pauses in effect, by the breaker's rule (dispatch_breaker.py): a
CIRCUIT_OPEN pause until it is closed, a RATE_LIMITED one until its `until` (its row
may stay after that, but claiming has resumed).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from types import MappingProxyType

from san_jobs.job_service.domain.dispatch import DispatchPause, PauseReason
from san_jobs.job_service.domain.model import JobType

log = logging.getLogger("job_service.transport.pause_cache")

# How old the pauses shown may be; also the poll interval while streams wait.
DEFAULT_MAX_AGE_SECONDS = 1.0

PauseMap = Mapping[JobType, DispatchPause]
NO_PAUSES: PauseMap = MappingProxyType({})

ReadPauses = Callable[[], Awaitable[Sequence[DispatchPause]]]


class PauseCache:
    """The current pauses by job type, refreshed from `read` when older than `max_age`."""

    def __init__(
        self,
        read: ReadPauses,
        *,
        max_age: float = DEFAULT_MAX_AGE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._read = read
        self._max_age = max_age
        self._clock = clock
        self._now = now
        # Every row as last read, and of them the pauses in effect (what is shown).
        self._rows: tuple[DispatchPause, ...] = ()
        self._pauses: PauseMap = NO_PAUSES
        self._read_at: float | None = None
        # The read in flight, shared by every caller that finds the copy stale.
        self._reading: asyncio.Future[PauseMap] | None = None
        # Bumped whenever a read finds a different pause set; streams wait on it.
        self._version = 0
        self._changed = asyncio.Event()
        self._waiters = 0
        self._poller: asyncio.Task[None] | None = None

    @property
    def version(self) -> int:
        """Bumped each time a read finds a different pause set."""
        return self._version

    @property
    def polling(self) -> bool:
        """Whether a poller runs (only while a stream waits for a change)."""
        return self._poller is not None

    @property
    def last(self) -> PauseMap:
        """The pauses as last read, however old (no read)."""
        return self._pauses

    async def current(self) -> PauseMap:
        """The pauses, at most `max_age` old. A failed read keeps the last copy (a
        job read that worked is not failed for want of its pause)."""
        if self._read_at is not None and self._clock() - self._read_at < self._max_age:
            return self._show() if self._rows else self._pauses
        try:
            return await self.fresh()
        except Exception:
            log.warning("could not read the dispatch pauses; showing the last known", exc_info=True)
            return self._pauses

    async def fresh(self) -> PauseMap:
        """The pauses as the store holds them now (one read shared by concurrent callers)."""
        if self._reading is None:
            self._reading = asyncio.ensure_future(self._read_now())
        reading = self._reading
        try:
            return await asyncio.shield(reading)
        finally:
            if reading.done() and self._reading is reading:
                self._reading = None

    async def _read_now(self) -> PauseMap:
        self._rows = tuple(await self._read())
        self._read_at = self._clock()
        return self._show()

    def _show(self) -> PauseMap:
        """The pauses in effect now among the rows read; a different set than the
        one shown before wakes the streams waiting for a change."""
        now = self._now()
        pauses = {
            p.job_type: p
            for p in self._rows
            if p.reason is not PauseReason.RATE_LIMITED or p.until > now
        }
        if pauses != dict(self._pauses):
            self._pauses = MappingProxyType(pauses)
            self._version += 1
            self._changed.set()
            self._changed = asyncio.Event()
        return self._pauses

    async def wait_for_change(self, seen_version: int) -> PauseMap:
        """Wait until the pause set differs from the one of `seen_version`, polling
        the store every `max_age` meanwhile (one poller for all waiters)."""
        self._waiters += 1
        if self._poller is None:
            self._poller = asyncio.ensure_future(self._poll())
        try:
            while self._version == seen_version:
                await self._changed.wait()
            return self._pauses
        finally:
            self._waiters -= 1
            if self._waiters == 0 and self._poller is not None:
                self._poller.cancel()
                self._poller = None

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self._max_age)
            try:
                await self.fresh()
            except Exception:
                log.warning("could not read the dispatch pauses; retrying", exc_info=True)
