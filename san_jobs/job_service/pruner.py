"""The pruner: deletes terminal jobs past their retention (domain/retention.py).

Every instance runs one; the store's prune lock (a PostgreSQL advisory lock) lets one
at a time work, the others skip their turn. A run fixes each status's cutoff when it
starts, then deletes in batches (`batch_size` rows, one short transaction each, a
pause of `batch_pause` between them) until a batch comes back short: never a long
lock, and the queue's own writes go on between batches. The first run comes shortly
after start, then every `interval` seconds give or take `jitter`, so instances
started together do not all knock at once.

PruneJobs runs the same thing now (`prune`), or counts what would go (`dry_run`).
What a run deleted is logged in one line (only when it deleted something: no line
every minute about nothing) and reported to `on_deleted` (the metrics) per batch.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from san_jobs.job_service.domain.errors import PruneRunningError, StorageError
from san_jobs.job_service.domain.model import JobStatus
from san_jobs.job_service.domain.ports import CountPrunableParams, PruneBatchParams, RetentionStore
from san_jobs.job_service.domain.retention import (
    PRUNABLE_STATUSES,
    PruneCount,
    RetentionPolicy,
    report_counts,
)
from san_jobs.shared.background import BackgroundLoop

log = logging.getLogger("job_service.pruner")
audit = logging.getLogger("job_service.audit")

# A dry run counts at most this many jobs per status: an index range count that stops
# there stays in milliseconds on any table; past it the answer says "more".
DRY_RUN_COUNT_CAP = 100_000

OnDeleted = Callable[[JobStatus, int], None]


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class PrunerConfig:
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    # Seconds between two runs (each within +-jitter of it).
    interval: float = 60.0
    jitter: float = 0.1
    # The first run: this long after start (at most `interval`), jittered too.
    first_delay: float = 5.0
    # Rows per DELETE, and seconds between two DELETEs of a run.
    batch_size: int = 1_000
    batch_pause: float = 0.05
    count_cap: int = DRY_RUN_COUNT_CAP


class Pruner:
    def __init__(
        self,
        store: RetentionStore,
        config: PrunerConfig | None = None,
        *,
        on_deleted: OnDeleted | None = None,
        clock: Callable[[], datetime] = _utc_now,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rand: Callable[[], float] | None = None,
    ) -> None:
        self._store = store
        self.config = config or PrunerConfig()
        self._on_deleted = on_deleted
        self._clock = clock
        self._sleep = sleep
        # Its own generator, not the random module's shared one: the jitter draws
        # nothing from a state others (a seeded test, hypothesis) rely on.
        self._rand = rand or random.Random().random
        self._running = False  # this instance's own runs (the loop, PruneJobs) take turns
        self._loop = BackgroundLoop("pruner", self.run_forever)

    # -- one run ------------------------------------------------------------------

    async def prune(self, actor: str | None = None) -> tuple[PruneCount, ...]:
        """Delete every job past retention now; what was deleted, per status.
        PruneRunningError when a prune runs already (here or on another instance).
        `actor` (PruneJobs' caller) is named in the audit log."""
        if self._running:
            raise PruneRunningError()
        self._running = True
        try:
            started = time.monotonic()
            cutoffs = self.config.retention.cutoffs(self._clock())
            async with self._store.prune_lock() as held:
                if not held:
                    raise PruneRunningError()
                deleted, batches = await self._delete(cutoffs)
        finally:
            self._running = False
        report = report_counts(self.config.retention, cutoffs, deleted)
        total = sum(deleted.values())
        if total:
            log.info(
                "pruned %d jobs past retention: %s (%d batches, %.1fs)",
                total,
                _by_status(report),
                batches,
                time.monotonic() - started,
            )
        if actor is not None:
            audit.info("PruneJobs by %s: deleted %d jobs (%s)", actor, total, _by_status(report))
        return report

    async def _delete(self, cutoffs: dict[JobStatus, datetime]) -> tuple[Counter[JobStatus], int]:
        size, deleted, batches = self.config.batch_size, Counter[JobStatus](), 0
        for status in PRUNABLE_STATUSES:
            cutoff = cutoffs.get(status)
            if cutoff is None:
                continue  # kept forever
            while True:
                count = await self._store.prune_batch(
                    PruneBatchParams(status=status, cutoff=cutoff, limit=size)
                )
                batches += 1
                if count:
                    deleted[status] += count
                    self._report(status, count)
                if count < size:
                    break  # a short batch: nothing of this status is left past the cutoff
                # Between two full batches: let the queue's own writes through.
                await self._sleep(self.config.batch_pause)
        return deleted, batches

    def _report(self, status: JobStatus, count: int) -> None:
        if self._on_deleted is None:
            return
        try:
            self._on_deleted(status, count)
        except Exception:  # a metrics bug must not stop the deletes
            log.exception("reporting %d pruned %s jobs failed", count, status.value)

    async def dry_run(self, actor: str | None = None) -> tuple[PruneCount, ...]:
        """How many jobs of each status are past retention now (at most
        `count_cap` each; `more` says when there are more), deleting nothing."""
        cutoffs = self.config.retention.cutoffs(self._clock())
        cap = self.config.count_cap
        counts = await self._store.count_prunable(
            CountPrunableParams(cutoffs=cutoffs, limit=cap + 1)
        )
        report = report_counts(self.config.retention, cutoffs, counts, cap)
        if actor is not None:
            audit.info("PruneJobs (dry run) by %s: %s past retention", actor, _by_status(report))
        return report

    # -- the loop -----------------------------------------------------------------

    def next_delay(self, first: bool = False) -> float:
        """Seconds until the next run: `interval` (or the first delay) +- jitter."""
        base = min(self.config.first_delay, self.config.interval) if first else self.config.interval
        spread = base * self.config.jitter
        return max(0.0, base - spread + 2 * spread * self._rand())

    def start(self) -> None:
        """Run every `interval` in the background (not when every status is kept forever)."""
        if self.config.retention.prunes_anything:
            self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    async def run_forever(self) -> None:
        first = True
        while True:
            await self._sleep(self.next_delay(first))
            first = False
            try:
                await self.prune()
            except PruneRunningError:
                log.debug("prune skipped: another prune holds the lock")
            except StorageError as error:
                log.warning("prune failed, next try in %.0fs: %s", self.config.interval, error)
            except Exception:  # the loop must outlive a bug in one run
                log.exception("prune failed, next try in %.0fs", self.config.interval)


def _by_status(report: tuple[PruneCount, ...]) -> str:
    return " ".join(
        f"{c.status.value}={c.count}{'+' if c.more else ''}"
        if c.retention_seconds is not None
        else f"{c.status.value}=kept"
        for c in report
    )
