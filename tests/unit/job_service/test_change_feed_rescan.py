"""The re-scan a submitter's change-feed streams may make is bounded (issue 42, point
13): however many streams a caller opens from an old cursor, at most
`scans_per_caller` database looks are in flight for it and it scans at most
`scan_positions_per_second`, all its streams together; another caller's catch-up does
not wait for it. A fake ChangeStore: no database, the test takes well under 2 s."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import replace

from san_jobs.job_service.change_feed import ChangeFeed
from san_jobs.job_service.domain.changes import ChangeFilter, FeedState, JobChange
from san_jobs.job_service.domain.model import Job, JobStatus
from san_jobs.job_service.domain.ports import PruneChangesParams, ReadChangesParams
from tests.unit.job_service.test_updates import job

LAST = 20_000  # positions kept: four windows of 5,000
STATE = FeedState("ab", LAST, 0, cursor_key="00" * 64)


def _own_change(caller: str) -> JobChange:
    """Each caller's one change, at the feed's last position (after what it scans)."""
    done = replace(job(f"job-{caller}", JobStatus.COMPLETED), requested_by=caller)
    return JobChange(LAST, done)


class ScanCountingStore:
    """A feed of LAST positions where only the last change is the caller's; counts
    each caller's looks in flight and the positions they cover."""

    def __init__(self) -> None:
        self.in_flight: Counter[str] = Counter()
        self.most_in_flight: Counter[str] = Counter()
        self.scanned: Counter[str] = Counter()

    async def sequence_changes(self, limit: int) -> FeedState:
        return STATE

    async def read_changes(self, params: ReadChangesParams) -> tuple[list[JobChange], FeedState]:
        caller = params.change_filter.requested_by or ""
        self.in_flight[caller] += 1
        self.most_in_flight[caller] = max(self.most_in_flight[caller], self.in_flight[caller])
        try:
            await asyncio.sleep(0.01)  # a look takes time: streams overlap
        finally:
            self.in_flight[caller] -= 1
        self.scanned[caller] += params.through_pos - params.after_pos
        own = _own_change(caller)
        found = [own] if params.after_pos < own.pos <= params.through_pos else []
        return found, STATE

    async def prune_changes(self, params: PruneChangesParams) -> int:
        return 0


async def _first(feed: ChangeFeed, caller: str) -> tuple[str, Job | None]:
    """The first message of a stream kept to `caller`'s jobs, resumed from position 0."""
    stream = feed.follow("ab.0", ChangeFilter(requested_by=caller))
    try:
        return await anext(stream)
    finally:
        await stream.aclose()


async def test_ten_streams_of_one_caller_scan_as_one_bounded_reader() -> None:
    store = ScanCountingStore()
    rate = 200_000.0  # ten streams of 20,000 positions: at least ~0.9 s at this rate
    feed = ChangeFeed(store, scans_per_caller=2, scan_positions_per_second=rate)

    started = time.monotonic()
    mallory = [asyncio.ensure_future(_first(feed, "mallory")) for _ in range(10)]
    await asyncio.sleep(0.05)  # mallory's looks are queued first
    victor_started = time.monotonic()
    victor = await asyncio.wait_for(_first(feed, "victor"), 5)
    victor_took = time.monotonic() - victor_started
    firsts = await asyncio.wait_for(asyncio.gather(*mallory), 10)
    took = time.monotonic() - started

    assert all(cursor == STATE.cursor(LAST, "mallory") and j is not None for cursor, j in firsts)
    assert victor[1] is not None and victor[1].requested_by == "victor"
    assert store.scanned["mallory"] == 10 * LAST  # nothing skipped: every stream read all
    assert store.most_in_flight["mallory"] <= 2, store.most_in_flight
    # The first look of each caller is free; every later one waits for the rate.
    assert took >= (10 * LAST - 5_000) / rate * 0.9, took
    assert victor_took < 0.5, victor_took  # victor's budget is his own
    assert not feed._budgets  # every stream closed: nothing kept per caller


async def test_a_stream_of_every_job_is_not_held_to_a_callers_budget() -> None:
    store = ScanCountingStore()
    feed = ChangeFeed(store, scans_per_caller=1, scan_positions_per_second=1_000.0)
    stream = feed.follow("ab.0", ChangeFilter())
    started = time.monotonic()
    got: list[tuple[str, Job | None]] = []
    try:
        async with asyncio.timeout(2):
            async for item in stream:  # progress marks, then the change
                got.append(item)
                if item[1] is not None:
                    break
    finally:
        await stream.aclose()
    assert got[-1][0] == f"ab.{LAST}"
    assert time.monotonic() - started < 1.0
