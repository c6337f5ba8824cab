"""The pruner on the in-memory store with a clock and a sleep the test drives: what a
run deletes, its batches, its dry run, its turns, its loop and its log."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

import pytest

from san_jobs.job_service.domain.errors import PruneRunningError
from san_jobs.job_service.domain.model import Failure, Job, JobStatus, JobType, NewJob, OnDuplicate
from san_jobs.job_service.domain.ports import (
    CancelParams,
    ClaimParams,
    CompleteParams,
    EnqueueParams,
    FailParams,
)
from san_jobs.job_service.domain.retention import (
    RetentionPolicy,
    format_retention,
    parse_retention,
)
from san_jobs.job_service.pruner import Pruner, PrunerConfig
from san_jobs.job_service.storage.memory import MemoryJobStore
from tests.support.clock import FakeClock

COMPLETED, FAILED, CANCELLED = JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED


class Sleeps:
    """The pruner's sleep: records each delay and moves the clock by it; after
    `stop_after` sleeps it ends the loop (as a cancelled task would end)."""

    def __init__(self, clock: FakeClock, stop_after: int = 1_000) -> None:
        self.clock = clock
        self.delays: list[float] = []
        self.stop_after = stop_after

    async def __call__(self, seconds: float) -> None:
        if len(self.delays) >= self.stop_after:
            raise asyncio.CancelledError
        self.delays.append(seconds)
        self.clock.advance(seconds)
        await asyncio.sleep(0)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 1, 1, tzinfo=UTC))


@pytest.fixture
def store(clock: FakeClock) -> MemoryJobStore:
    return MemoryJobStore(clock=clock)


async def ended(store: MemoryJobStore, target_id: str, status: JobStatus) -> Job:
    job, _ = await store.commands.enqueue(
        EnqueueParams(
            job=NewJob(JobType.CARD_ANALYSIS, target_id, {"text": "t"}, "tester", None, 1),
            on_duplicate=OnDuplicate.REJECT,
        )
    )
    if status is CANCELLED:
        return await store.commands.cancel(CancelParams(job_id=job.id, reason="no"))
    (claim,) = await store.worker.claim(ClaimParams(limit=1, lease_seconds=60))
    if status is COMPLETED:
        return await store.worker.complete(
            CompleteParams(job_id=job.id, token=claim.token, result={"summary": "s"})
        )
    return await store.worker.fail(
        FailParams(
            job_id=job.id,
            token=claim.token,
            failure=Failure("INTERNAL", "", "boom", False),
            retry_at=None,
        )
    )


def pruner(
    store: MemoryJobStore,
    clock: FakeClock,
    sleeps: Sleeps,
    deleted: list[tuple[JobStatus, int]] | None = None,
    **config: object,
) -> Pruner:
    settings: dict[str, object] = {
        "retention": RetentionPolicy(completed=100.0, failed=1000.0, cancelled=None),
        "interval": 60.0,
        "first_delay": 5.0,
        "batch_size": 2,
        "batch_pause": 0.5,
    } | config
    return Pruner(
        store.retention,
        PrunerConfig(**settings),  # type: ignore[arg-type]
        on_deleted=None if deleted is None else lambda s, n: deleted.append((s, n)),
        clock=clock,
        sleep=sleeps,
        rand=lambda: 0.5,
    )


async def test_a_run_deletes_each_status_past_its_own_retention_in_batches(
    store: MemoryJobStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    done = [await ended(store, f"done-{i}", COMPLETED) for i in range(5)]
    failed = await ended(store, "failed", FAILED)
    cancelled = await ended(store, "cancelled", CANCELLED)
    pending, _ = await store.commands.enqueue(
        EnqueueParams(
            job=NewJob(JobType.CARD_ANALYSIS, "pending", {"text": "t"}, "tester", None, 1),
            on_duplicate=OnDuplicate.REJECT,
        )
    )
    clock.advance(500)  # past COMPLETED's 100 s, not FAILED's 1000 s; CANCELLED is kept
    sleeps, deleted = Sleeps(clock), []
    prune = pruner(store, clock, sleeps, deleted)

    started = clock.now
    with caplog.at_level(logging.INFO, logger="job_service.pruner"):
        report = await prune.prune()

    assert [(c.status, c.count) for c in report] == [(COMPLETED, 5), (FAILED, 0), (CANCELLED, 0)]
    assert report[2].retention_seconds is None and report[2].cutoff is None
    # The cutoffs are fixed when the run starts.
    assert report[0].cutoff == started - timedelta(seconds=100)
    # Batches of 2: 2 + 2 + 1, a pause after each full batch only.
    assert deleted == [(COMPLETED, 2), (COMPLETED, 2), (COMPLETED, 1)]
    assert sleeps.delays == [0.5, 0.5]
    remaining = set(store.table.rows)
    assert not remaining & {j.id for j in done}
    assert {failed.id, cancelled.id, pending.id} <= remaining
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    assert lines[0].startswith("pruned 5 jobs past retention: COMPLETED=5 FAILED=0 CANCELLED=kept")

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="job_service.pruner"):
        again = await prune.prune()
    assert sum(c.count for c in again) == 0
    assert caplog.records == []  # nothing deleted, nothing logged


async def test_the_dry_run_counts_up_to_the_cap_and_deletes_nothing(
    store: MemoryJobStore, clock: FakeClock
) -> None:
    for i in range(3):
        await ended(store, f"done-{i}", COMPLETED)
    await ended(store, "failed", FAILED)
    clock.advance(2000)
    report = await pruner(store, clock, Sleeps(clock), count_cap=2).dry_run()
    assert [(c.status, c.count, c.more) for c in report] == [
        (COMPLETED, 2, True),
        (FAILED, 1, False),
        (CANCELLED, 0, False),
    ]
    assert len(store.table.rows) == 4


async def test_a_prune_held_elsewhere_is_refused_and_the_loop_skips_its_turn(
    store: MemoryJobStore, clock: FakeClock
) -> None:
    await ended(store, "done", COMPLETED)
    clock.advance(200)
    # Another instance on the same database holds the pruners' lock.
    store.table.prune_locked = True
    prune = pruner(store, clock, Sleeps(clock, stop_after=3))
    with pytest.raises(PruneRunningError):
        await prune.prune()
    with pytest.raises(asyncio.CancelledError):
        await prune.run_forever()  # two turns skipped, no error out of the loop
    assert len(store.table.rows) == 1
    store.table.prune_locked = False
    assert sum(c.count for c in await prune.prune()) == 1


async def test_runs_of_one_instance_take_turns(store: MemoryJobStore, clock: FakeClock) -> None:
    for i in range(3):
        await ended(store, f"done-{i}", COMPLETED)
    clock.advance(200)
    paused = asyncio.Event()
    release = asyncio.Event()

    async def slow_pause(_: float) -> None:
        paused.set()
        await release.wait()

    prune = Pruner(
        store.retention,
        PrunerConfig(retention=RetentionPolicy(completed=100.0), batch_size=1),
        clock=clock,
        sleep=slow_pause,
    )
    first = asyncio.create_task(prune.prune())
    await paused.wait()  # mid-run, between two batches
    with pytest.raises(PruneRunningError):
        await prune.prune()
    release.set()
    assert sum(c.count for c in await first) == 3


async def test_the_loop_runs_soon_after_start_then_every_interval(
    store: MemoryJobStore, clock: FakeClock
) -> None:
    job = await ended(store, "done", COMPLETED)
    sleeps, deleted = Sleeps(clock, stop_after=4), []
    prune = pruner(store, clock, sleeps, deleted)
    with pytest.raises(asyncio.CancelledError):
        await prune.run_forever()
    # First after 5 s, then every 60 s (rand 0.5: the middle of the jitter).
    assert sleeps.delays == [5.0, 60.0, 60.0, 60.0]
    # Retention 100 s: too young at 5 s and 65 s, deleted at the run at 125 s.
    assert deleted == [(COMPLETED, 1)]
    assert job.id not in store.table.rows


def test_the_delays_are_jittered_around_the_interval(store: MemoryJobStore) -> None:
    config = PrunerConfig(interval=100.0, jitter=0.1, first_delay=5.0)
    low = Pruner(store.retention, config, rand=lambda: 0.0)
    high = Pruner(store.retention, config, rand=lambda: 1.0)
    assert (low.next_delay(), high.next_delay()) == (90.0, 110.0)
    assert (low.next_delay(first=True), high.next_delay(first=True)) == (4.5, 5.5)
    # A short interval: the first run no later than one interval after start.
    short = Pruner(store.retention, PrunerConfig(interval=0.5, jitter=0.0), rand=lambda: 0.5)
    assert short.next_delay(first=True) == 0.5


async def test_a_failing_metrics_callback_does_not_stop_the_deletes(
    store: MemoryJobStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(3):
        await ended(store, f"done-{i}", COMPLETED)
    clock.advance(200)

    def broken(status: JobStatus, count: int) -> None:
        raise RuntimeError("metrics bug")

    prune = Pruner(
        store.retention, PrunerConfig(retention=RetentionPolicy(completed=100.0)), on_deleted=broken
    )
    prune._clock = clock
    with caplog.at_level(logging.ERROR):
        assert sum(c.count for c in await prune.prune()) == 3
    assert store.table.rows == {}
    assert any("reporting 3 pruned COMPLETED jobs failed" in r.getMessage() for r in caplog.records)


async def test_nothing_runs_when_every_status_is_kept_forever(store: MemoryJobStore) -> None:
    prune = Pruner(store.retention, PrunerConfig(retention=RetentionPolicy(None, None, None)))
    prune.start()
    assert not prune._loop.running
    await prune.stop()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("7d", 604_800.0),
        ("12h", 43_200.0),
        ("30m", 1_800.0),
        ("90s", 90.0),
        ("1w", 604_800.0),
        ("1d12h", 129_600.0),
        ("3600", 3_600.0),
        ("0.5", 0.5),
        (" 2D ", 172_800.0),
        ("off", None),
        ("0", None),
        ("0s", None),
        ("never", None),
    ],
)
def test_retention_durations(text: str, seconds: float | None) -> None:
    assert parse_retention(text) == seconds


@pytest.mark.parametrize("text", ["", "7x", "-1", "1e400", "nan", "7 days", "d", "101y", "40000d"])
def test_bad_retention_durations_are_one_line_errors(text: str) -> None:
    with pytest.raises(ValueError) as error:
        parse_retention(text)
    assert "\n" not in str(error.value)


def test_retention_is_written_back_in_its_largest_unit() -> None:
    assert [format_retention(s) for s in (604_800.0, 129_600.0, 90.0, 0.5, None)] == [
        "1w",
        "36h",
        "90s",
        "0.5s",
        "off",
    ]
