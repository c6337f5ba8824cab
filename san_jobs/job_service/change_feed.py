"""The change feed of one instance (StreamJobChanges): positions, retention, streams.

Every instance runs one `ChangeFeed`. Its task wakes when a change may have been
committed (a job published here in a final state or back to PENDING, another
instance's notification, or every `poll_interval` as a backstop), gives positions
to the committed changes (PostgreSQL; storage/changes.py says why they come without
one), and reads the new changes once into a small buffer that every caught-up stream
reads from, so a thousand streams cost one query per wake, not a thousand. A stream
that is behind (resuming from an old cursor) reads the database in windows of
positions until it catches up. The same task deletes changes past `--retain-changes`.

Order and gaps: a stream sends changes by position; positions a reader can see have
no gap, so "after this cursor" never skips one. A cursor below what retention kept,
or of another feed, is refused (CursorExpiredError), never silently moved forward.

Tenants: a stream kept to one caller's jobs (a submitter's under --auth token) reads
that caller's changes only, and its progress marks stand only at that caller's own
changes its filter skipped, so no message tells it how many changes other tenants
made (a mark at the feed's last position would). What such streams re-read from the
database is bounded per caller (SCANS_PER_CALLER, SCAN_POSITIONS_PER_SECOND).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from san_jobs.job_service.domain.changes import (
    NOT_A_CURSOR,
    ChangeFilter,
    Cursor,
    FeedState,
    JobChange,
    parse_cursor,
)
from san_jobs.job_service.domain.errors import CursorExpiredError, InvalidRequestError, StorageError
from san_jobs.job_service.domain.model import Job, JobStatus
from san_jobs.job_service.domain.ports import ChangeStore, PruneChangesParams, ReadChangesParams
from san_jobs.shared.background import BackgroundLoop
from san_jobs.shared.field_violation import FieldViolation

log = logging.getLogger("job_service.change_feed")

# Changes a caught-up stream can read from memory; a wake that brings more than this
# (an instance back from an outage) sends streams to the database instead.
BUFFER_CHANGES = 2_048
# Positions one database read of a stream covers (the rows one look scans at most),
# and changes it returns at most.
READ_WINDOW = 5_000
READ_LIMIT = 500
# The re-scan a caller's streams may make (a stream kept to one caller's jobs, a
# submitter's, reading the database because it is behind: resuming from an old cursor,
# or from "" over everything --retain-changes keeps). Whatever the number of its
# streams, a caller has at most SCANS_PER_CALLER reads in flight and scans at most
# SCAN_POSITIONS_PER_SECOND positions a second, all its streams together; a stream
# over it waits for its turn (it is not refused, and skips nothing). A caught-up
# stream reads the shared buffer and costs no look. Ten streams re-reading 7 days
# therefore cost what one bounded reader costs, and other callers' looks never wait
# for them.
SCANS_PER_CALLER = 2
SCAN_POSITIONS_PER_SECOND = 100_000
# Changes given positions per sequencer transaction.
SEQUENCE_BATCH = 5_000
# A filtered stream that skipped changes tells its reader how far it read (a
# cursor-only message) at most this often while caught up.
MARK_INTERVAL = 5.0
PRUNE_BATCH = 1_000

_STATUSES_THAT_CHANGE = frozenset(
    {JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.PENDING}
)


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(slots=True)
class _ScanBudget:
    """One caller's database looks: how many may be in flight, and when (monotonic)
    the next may start so that its streams together keep to the scan rate."""

    slots: asyncio.Semaphore
    free_at: float = 0.0
    streams: int = 0


class ChangeFeed:
    def __init__(
        self,
        store: ChangeStore,
        *,
        retention_seconds: float | None = 7 * 86_400.0,
        prune_interval: float = 60.0,
        poll_interval: float = 1.0,
        clock: Callable[[], datetime] = _utc_now,
        buffer_changes: int = BUFFER_CHANGES,
        mark_interval: float = MARK_INTERVAL,
        scans_per_caller: int = SCANS_PER_CALLER,
        scan_positions_per_second: float = SCAN_POSITIONS_PER_SECOND,
    ) -> None:
        self._store = store
        self._retention_seconds = retention_seconds
        self._prune_interval = prune_interval
        self._poll_interval = poll_interval
        self._clock = clock
        self._buffer_changes = buffer_changes
        self._mark_interval = mark_interval
        self._state: FeedState | None = None
        # The changes after position _base, in order, up to the last known position.
        self._buffer: list[JobChange] = []
        self._base = 0
        self._wake = asyncio.Event()
        # Set (and replaced) whenever the last known position moves: streams wait on it.
        self._moved = asyncio.Event()
        self._loop = BackgroundLoop("change-feed", self._run)
        self._next_prune = 0.0
        # One advance at a time (the task's, or a stream's that needs the latest state).
        self._advancing = asyncio.Lock()
        # Open streams. Without one, nothing waits for a change: the task ignores
        # wake-ups, gives positions once per poll (a batch) and reads nothing into
        # the buffer, so an instance nobody follows pays almost nothing per job.
        self._followers = 0
        self._scans_per_caller = scans_per_caller
        self._scan_rate = scan_positions_per_second
        # The scan budget of each caller with a stream kept to its jobs open here.
        self._budgets: dict[str, _ScanBudget] = {}

    @property
    def position(self) -> int:
        """The last position this instance has seen (0 before it has read the feed)."""
        return 0 if self._state is None else self._state.last_pos

    @property
    def mark_interval(self) -> float:
        """Seconds between a caught-up filtered stream's progress marks, at least."""
        return self._mark_interval

    @mark_interval.setter
    def mark_interval(self, seconds: float) -> None:
        self._mark_interval = seconds

    @property
    def streams(self) -> int:
        """StreamJobChanges streams following the feed here now."""
        return self._followers

    # -- the instance's task ---------------------------------------------------------

    def nudge(self) -> None:
        """A change may have been committed: look now (if a stream waits), not at the
        next poll."""
        if self._followers:
            self._wake.set()

    def on_published(self, jobs: Iterable[Job]) -> None:
        """UpdateHub listener: this instance committed these jobs' new states."""
        if self._followers and any(job.status in _STATUSES_THAT_CHANGE for job in jobs):
            self._wake.set()

    async def start(self) -> None:
        """Read the feed's state once (a store that cannot be reached is retried by
        the task), then follow it."""
        with contextlib.suppress(StorageError):
            await self._advance()
        self._next_prune = time.monotonic() + min(5.0, self._prune_interval)
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    async def _run(self) -> None:
        failures = 0
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._poll_interval):
                    await self._wake.wait()
            self._wake.clear()
            try:
                more = await self._advance()
                if time.monotonic() >= self._next_prune:
                    self._next_prune = time.monotonic() + self._prune_interval
                    await self.prune()
                failures = 0
            except StorageError as error:
                failures += 1
                if failures == 1 or failures % 60 == 0:
                    log.warning("change feed: the database failed (%d times): %s", failures, error)
                more = False
            except Exception:  # the task must outlive a bug in one pass
                log.exception("change feed: pass failed")
                more = False
            if more:
                self._wake.set()

    async def _advance(self) -> bool:
        """Give positions to committed changes and read the new ones into the buffer;
        True when more wait for a position (a full sequencer batch)."""
        async with self._advancing:
            return await self._advance_once()

    async def _advance_once(self) -> bool:
        before = self._state.last_pos if self._state is not None else None
        state = await self._store.sequence_changes(SEQUENCE_BATCH)
        if before is None or state.feed_id != (self._state.feed_id if self._state else ""):
            self._state, self._buffer, self._base = state, [], state.last_pos
            self._announce()
            return False
        if state.last_pos > before and self._followers:
            await self._fill(before, state)
        elif not self._followers:
            self._buffer, self._base = [], state.last_pos
        self._state = state
        if state.last_pos != before:
            self._announce()
        return state.last_pos - before >= SEQUENCE_BATCH

    async def _fill(self, before: int, state: FeedState) -> None:
        """The changes (before, state.last_pos] into the buffer, or an empty buffer at
        state.last_pos when they are too many to keep in memory."""
        count = state.last_pos - before
        if count > self._buffer_changes or self._base + len(self._buffer) != before:
            self._buffer, self._base = [], state.last_pos
            return
        changes, _ = await self._store.read_changes(
            ReadChangesParams(before, state.last_pos, ChangeFilter(), count)
        )
        if len(changes) != count:  # deleted meanwhile (a tiny retention): read from the database
            self._buffer, self._base = [], state.last_pos
            return
        self._buffer.extend(changes)
        overflow = len(self._buffer) - self._buffer_changes
        if overflow > 0:
            del self._buffer[:overflow]
            self._base += overflow

    def _announce(self) -> None:
        moved, self._moved = self._moved, asyncio.Event()
        moved.set()

    async def prune(self) -> int:
        """Delete the changes past retention, oldest first; how many."""
        if self._retention_seconds is None:
            return 0
        cutoff = self._clock() - timedelta(seconds=self._retention_seconds)
        total = 0
        while True:
            count = await self._store.prune_changes(PruneChangesParams(cutoff, PRUNE_BATCH))
            total += count
            if count < PRUNE_BATCH:
                break
            await asyncio.sleep(0.05)  # let the queue's own writes through
        if total:
            log.info("change feed: pruned %d changes past retention", total)
        return total

    # -- streams -----------------------------------------------------------------------

    async def _current(self) -> FeedState:
        if self._state is None:
            await self._advance()
        assert self._state is not None
        return self._state

    async def start_position(
        self, after_cursor: str, reader: str | None = None
    ) -> tuple[int, FeedState]:
        """Where a stream resuming after `after_cursor` starts; InvalidRequestError
        for a malformed cursor, CursorExpiredError for one whose changes are gone.
        `reader`: the caller a stream is kept to (a submitter), whose cursors are
        sealed for it (domain/changes.py); a refusal then names no position."""
        # The state as the database holds it now, not as this instance last saw it
        # (another instance may have pruned or moved the feed since).
        await self._advance()
        state = await self._current()
        if not after_cursor:
            return state.pruned_through, state
        try:
            cursor = parse_cursor(after_cursor)
        except ValueError as error:
            raise InvalidRequestError([FieldViolation("after_cursor", str(error))]) from None
        oldest = state.oldest_cursor(reader)
        if cursor.feed_id != state.feed_id:
            raise CursorExpiredError(
                after_cursor, oldest, "it is of another feed (another database)"
            )
        pos = await self._position(cursor, reader, state)
        if pos < state.pruned_through:
            raise CursorExpiredError(after_cursor, oldest, "its changes are past --retain-changes")
        if pos > state.last_pos:
            raise CursorExpiredError(
                after_cursor,
                oldest,
                (
                    f"it is ahead of this feed (last position {state.last_pos})"
                    if reader is None
                    else "it is ahead of this feed"
                )
                + ": a restored database?",
            )
        return pos, state

    async def _position(self, cursor: Cursor, reader: str | None, state: FeedState) -> int:
        """The position `cursor` stands at for `reader` (None: an unfiltered stream)."""
        if cursor.sealed is not None:
            if reader is None:
                why = "a cursor of a stream kept to one caller's jobs, not of this one"
                raise InvalidRequestError([FieldViolation("after_cursor", why)])
            try:
                return state.unseal(cursor.sealed, reader)
            except ValueError as error:
                raise InvalidRequestError([FieldViolation("after_cursor", str(error))]) from None
        assert cursor.pos is not None
        # A plain cursor from a stream kept to one caller: what an older instance gave
        # it (a rolling upgrade; migration 0020) stands at that caller's own change or
        # at the oldest kept position, and is taken there. Any other position is a
        # crafted one, refused as malformed: its answer must not tell whether it lies
        # ahead of the feed (how many changes other tenants made).
        if (
            reader is None
            or cursor.pos <= state.pruned_through
            or await self._store.is_own_change(cursor.pos, reader)
        ):
            return cursor.pos
        raise InvalidRequestError([FieldViolation("after_cursor", NOT_A_CURSOR)])

    async def follow(
        self, after_cursor: str, change_filter: ChangeFilter
    ) -> AsyncIterator[tuple[str, Job | None]]:
        """(cursor, job) for each change after `after_cursor` that matches, then live;
        (cursor, None) is a progress mark over changes that did not match."""
        self._followers += 1
        caller = change_filter.requested_by
        if caller is not None:
            budget = self._budgets.get(caller)
            if budget is None:
                budget = self._budgets[caller] = _ScanBudget(
                    asyncio.Semaphore(self._scans_per_caller)
                )
            budget.streams += 1
        try:
            async for item in self._follow(after_cursor, change_filter):
                yield item
        finally:
            self._followers -= 1
            if caller is not None:
                budget = self._budgets[caller]
                budget.streams -= 1
                if not budget.streams:
                    del self._budgets[caller]

    async def _follow(
        self, after_cursor: str, change_filter: ChangeFilter
    ) -> AsyncIterator[tuple[str, Job | None]]:
        # A stream kept to one caller's jobs (a submitter's) must not learn how far the
        # feed moved with others' changes: it reads that caller's changes only, and its
        # progress marks stand at the caller's own changes that its filter left out (a
        # position it could see anyway), never at a position others' changes reached.
        scoped = change_filter.requested_by is not None
        read_filter = ChangeFilter(requested_by=change_filter.requested_by) if scoped else None
        reader = change_filter.requested_by
        pos, state = await self.start_position(after_cursor, reader)
        sent = markable = pos
        marked = time.monotonic()
        while True:
            changes, pos = await self._read(pos, read_filter or change_filter, after_cursor)
            for change in changes:
                if scoped:
                    markable = change.pos
                    if not change_filter.matches(change.job):
                        continue
                yield state.cursor(change.pos, reader), change.job
                sent, marked = change.pos, time.monotonic()
            if not scoped:
                markable = pos
            elif self._state is not None:
                # What retention deleted is no secret (a refusal names the oldest
                # cursor): a mark there keeps a quiet caller's cursor from expiring
                # while others' changes are pruned (its inbox would stop on reconnect).
                markable = max(markable, min(pos, self._state.pruned_through))
            caught_up = self._state is not None and pos >= self._state.last_pos
            if markable > sent and (
                not caught_up or time.monotonic() - marked >= self._mark_interval
            ):
                yield state.cursor(markable, reader), None
                sent, marked = markable, time.monotonic()
            if caught_up:
                moved = self._moved
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._mark_interval):
                        await moved.wait()

    async def _read(
        self, pos: int, change_filter: ChangeFilter, after_cursor: str
    ) -> tuple[list[JobChange], int]:
        """The matching changes after `pos` (at most READ_LIMIT) and the position read
        up to: from the buffer when it holds what follows `pos`, else the database."""
        state = await self._current()
        if pos >= self._base and self._base + len(self._buffer) == state.last_pos:
            found: list[JobChange] = []
            for change in self._buffer[pos - self._base :]:
                if change_filter.matches(change.job):
                    found.append(change)
                    if len(found) == READ_LIMIT:
                        return found, change.pos
            return found, state.last_pos
        through = min(pos + READ_WINDOW, state.last_pos)
        params = ReadChangesParams(pos, through, change_filter, READ_LIMIT)
        budget = (
            None
            if change_filter.requested_by is None
            else self._budgets.get(change_filter.requested_by)
        )
        if budget is None:
            changes, after = await self._store.read_changes(params)
        else:
            async with budget.slots:
                wait = budget.free_at - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                budget.free_at = max(budget.free_at, time.monotonic()) + (
                    (through - pos) / self._scan_rate
                )
                changes, after = await self._store.read_changes(params)
        if after.pruned_through > pos:
            raise CursorExpiredError(
                after_cursor,
                after.oldest_cursor(change_filter.requested_by),
                "its changes were pruned while it was read",
            )
        if len(changes) == READ_LIMIT:
            return changes, changes[-1].pos
        return changes, through
