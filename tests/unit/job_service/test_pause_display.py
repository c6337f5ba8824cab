"""How dispatch pauses show in the contract: a PENDING job's waiting_for and
GetJobStats.paused (transport/convert.py), the cache they are read from
(transport/pause_cache.py), and a job-id stream sending a waiting job again when
its pause opens or closes (transport/servicer.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from san_jobs.job_service.domain.dispatch import DispatchPause, PauseReason
from san_jobs.job_service.domain.model import JobStats, JobStatus, JobType
from san_jobs.job_service.domain.validation import EnqueueLimits
from san_jobs.job_service.transport.convert import job_to_pb, stats_to_pb
from san_jobs.job_service.transport.pause_cache import PauseCache
from san_jobs.job_service.transport.servicer import JobServiceServicer
from san_jobs.job_service.transport.stream_limits import StreamGate, StreamLimits
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from tests.unit.job_service.test_job_freshness import state

SINCE = datetime(2026, 12, 1, 15, 4, tzinfo=UTC)
OPEN = DispatchPause(
    job_type=JobType.CARD_ANALYSIS,
    reason=PauseReason.CIRCUIT_OPEN,
    since=SINCE,
    until=SINCE + timedelta(seconds=5),
    last_error="AI gateway unavailable: connection refused",
    opened_by="instance-a",
)
LIMITED = DispatchPause(
    job_type=JobType.TIL_GENERATION,
    reason=PauseReason.RATE_LIMITED,
    since=SINCE,
    until=SINCE + timedelta(seconds=30),
    last_error="Rate Limit Exceeded (Too many requests)",
    opened_by="instance-b",
)
PAUSED = {OPEN.job_type: OPEN}


def test_a_pending_job_of_a_paused_type_says_what_it_waits_for() -> None:
    message = job_to_pb(state(JobStatus.PENDING), pauses=PAUSED)
    assert message.HasField("waiting_for")
    assert message.waiting_for.job_type == pb.JOB_TYPE_CARD_ANALYSIS
    assert message.waiting_for.reason == pb.PAUSE_REASON_CIRCUIT_OPEN
    assert message.waiting_for.since.ToDatetime(tzinfo=UTC) == SINCE
    assert message.waiting_for.until.ToDatetime(tzinfo=UTC) == OPEN.until
    assert message.waiting_for.last_error == OPEN.last_error


def test_only_pending_jobs_of_the_paused_type_wait() -> None:
    for status in (JobStatus.PROCESSING, JobStatus.COMPLETED, JobStatus.FAILED):
        assert not job_to_pb(state(status), pauses=PAUSED).HasField("waiting_for")
    other_type = {LIMITED.job_type: LIMITED}
    assert not job_to_pb(state(JobStatus.PENDING), pauses=other_type).HasField("waiting_for")
    assert not job_to_pb(state(JobStatus.PENDING)).HasField("waiting_for")


def test_stats_list_every_paused_type_in_registry_order() -> None:
    response = stats_to_pb(JobStats(counts=(), oldest_pending_created_at=None), [LIMITED, OPEN])
    assert [(p.job_type, p.reason) for p in response.paused] == [
        (pb.JOB_TYPE_CARD_ANALYSIS, pb.PAUSE_REASON_CIRCUIT_OPEN),
        (pb.JOB_TYPE_TIL_GENERATION, pb.PAUSE_REASON_RATE_LIMITED),
    ]
    assert not stats_to_pb(JobStats(counts=(), oldest_pending_created_at=None)).paused


class _Store:
    """The one store method the cache calls, counting its calls."""

    def __init__(self) -> None:
        self.pauses: list[DispatchPause] = []
        self.reads = 0
        self.read_done = asyncio.Event()

    async def dispatch_pauses(self) -> list[DispatchPause]:
        self.reads += 1
        await asyncio.sleep(0)  # a real read yields to the loop
        self.read_done.set()
        return list(self.pauses)

    async def reads_reach(self, count: int) -> None:
        while self.reads < count:
            self.read_done.clear()
            await asyncio.wait_for(self.read_done.wait(), 5)


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_the_cache_reads_the_store_once_per_max_age_however_many_callers() -> None:
    store, clock = _Store(), _Clock()
    cache = PauseCache(store.dispatch_pauses, max_age=1.0, clock=clock)
    results = await asyncio.gather(*(cache.current() for _ in range(200)))
    assert store.reads == 1
    assert all(r == {} for r in results)
    store.pauses = [OPEN]
    clock.now += 0.9
    assert await cache.current() == {}
    assert store.reads == 1
    clock.now += 0.2
    assert await cache.current() == PAUSED
    assert store.reads == 2


async def test_fresh_reads_now_and_a_failed_read_keeps_the_last_pauses() -> None:
    store, clock = _Store(), _Clock()
    cache = PauseCache(store.dispatch_pauses, max_age=1.0, clock=clock)
    store.pauses = [OPEN]
    assert await cache.current() == PAUSED
    store.pauses = []
    assert await cache.fresh() == {}

    async def broken() -> list[DispatchPause]:
        raise ConnectionError("database down")

    failing = PauseCache(broken, max_age=1.0, clock=clock)
    assert await failing.current() == {}


async def test_a_waiter_hears_of_a_change_and_the_poller_stops_after() -> None:
    store = _Store()
    cache = PauseCache(store.dispatch_pauses, max_age=0.01)
    assert await cache.current() == {}
    waiter = asyncio.ensure_future(cache.wait_for_change(cache.version))
    await store.reads_reach(4)  # three polls found nothing new
    assert cache.polling and not waiter.done()
    store.pauses = [OPEN]
    assert await asyncio.wait_for(waiter, 5) == PAUSED
    assert not cache.polling, "nobody waits: the poller must have stopped"


class _App:
    def __init__(self, snapshot: Sequence[Any]) -> None:
        self._snapshot = {job.id: job for job in snapshot}

    async def load(self, job_ids: Sequence[str], owner: str | None = None) -> dict[str, Any]:
        return {i: self._snapshot[i] for i in job_ids if i in self._snapshot}


class _Quiet:
    """A subscription on which nothing changes until `finish` hands out the last state."""

    def __init__(self) -> None:
        self._done = asyncio.Event()
        self._last: list[Any] = []

    def finish(self, job: Any) -> None:
        self._last = [job]
        self._done.set()

    async def get(self) -> list[Any]:
        await self._done.wait()
        self._done.clear()
        last, self._last = self._last, []
        return last


async def test_a_stream_sends_a_waiting_job_again_when_its_pause_opens_and_closes() -> None:
    store = _Store()
    cache = PauseCache(store.dispatch_pauses, max_age=0.01)
    servicer = JobServiceServicer(
        _App([state(JobStatus.PENDING)]),  # type: ignore[arg-type]
        EnqueueLimits(),
        3,
        stream_gate=StreamGate(StreamLimits(10, 10, 10, 10, 10)),
        pauses=cache,
    )
    subscription = _Quiet()
    stream = servicer._watch_jobs(("a",), subscription, None)

    async def next_shown() -> pb.Job:
        job = await asyncio.wait_for(anext(stream), 5)
        return job_to_pb(job, pauses=cache.last)

    assert not (await next_shown()).HasField("waiting_for")
    store.pauses = [OPEN]
    shown = await next_shown()
    assert shown.status == pb.JOB_STATUS_PENDING
    assert shown.waiting_for.reason == pb.PAUSE_REASON_CIRCUIT_OPEN
    store.pauses = []
    assert not (await next_shown()).HasField("waiting_for")
    subscription.finish(state(JobStatus.COMPLETED, at=1))
    assert (await next_shown()).status == pb.JOB_STATUS_COMPLETED
    assert [job async for job in stream] == []


async def test_a_rate_limit_past_its_until_is_no_longer_shown() -> None:
    store, clock = _Store(), _Clock()
    wall = [LIMITED.until - timedelta(seconds=1)]
    cache = PauseCache(store.dispatch_pauses, max_age=1.0, clock=clock, now=lambda: wall[0])
    store.pauses = [OPEN, LIMITED]
    assert set(await cache.current()) == {OPEN.job_type, LIMITED.job_type}
    version = cache.version
    wall[0] = LIMITED.until  # claiming resumes by itself; the row may stay
    assert await cache.current() == PAUSED
    assert store.reads == 1
    assert cache.version > version, "streams of its waiting jobs must hear of it"
    wall[0] += timedelta(hours=1)  # an open circuit stays until it is closed
    clock.now += 2
    assert await cache.current() == PAUSED
