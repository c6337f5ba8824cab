"""The worker's dispatch pauses (san_jobs/job_service/dispatch_breaker.py): the real Worker over
MemoryJobStore and a gateway whose health the test switches, on the virtual-time loop
(tests/support/virtual_time.py), so outages of minutes take milliseconds."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from san_jobs.job_service.dispatch_breaker import BreakerConfig
from san_jobs.job_service.domain.backoff import BackoffPolicy
from san_jobs.job_service.domain.dispatch import DispatchPause, PauseReason
from san_jobs.job_service.domain.failures import GatewayCallError
from san_jobs.job_service.domain.model import (
    GatewayAnswer,
    Job,
    JobStatus,
    JobType,
    JsonDict,
    NewJob,
    OnDuplicate,
)
from san_jobs.job_service.domain.ports import EnqueueParams, OpenPauseParams
from san_jobs.job_service.storage.memory import MemoryJobStore
from san_jobs.job_service.storage.memory_pauses import MemoryPauseStore
from san_jobs.job_service.worker import Worker, WorkerConfig
from tests.support.virtual_time import on_virtual_time, running_loop

RESULT: JsonDict = {"summary": "요약.", "tags": ["breaker"], "embedding": [0.6, 0.8]}
UNAVAILABLE = GatewayCallError("UNAVAILABLE", "", "connection refused")
INVALID = GatewayCallError("INVALID_ARGUMENT", "TOKEN_LIMIT_EXCEEDED", "Token limit exceeded")
CARD = JobType.CARD_ANALYSIS


@dataclass
class SwitchedGateway:
    """Answers `failure` while set, else RESULT; each call takes `latency` seconds."""

    failure: GatewayCallError | None = None
    latency: float = 0.1
    calls: list[tuple[float, str]] = field(default_factory=list)  # (loop time, job id)
    called: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self, job: Job, deadline: float) -> GatewayAnswer:
        self.calls.append((asyncio.get_running_loop().time(), job.id))
        self.called.set()
        failure = self.failure
        await asyncio.sleep(self.latency)
        if failure is not None:
            raise failure
        return GatewayAnswer(dict(RESULT))


@dataclass
class Rig:
    store: MemoryJobStore
    gateway: SwitchedGateway
    worker: Worker
    changed: asyncio.Event
    jobs: list[str] = field(default_factory=list)

    async def enqueue(self, count: int, max_attempts: int = 3) -> None:
        for _ in range(count):
            new = NewJob(CARD, f"t-{len(self.jobs)}", {"text": "x"}, "tester", None, max_attempts)
            job, _ = await self.store.commands.enqueue(
                EnqueueParams(job=new, on_duplicate=OnDuplicate.REJECT)
            )
            self.jobs.append(job.id)
        self.worker.wake()

    async def all_jobs(self) -> list[Job]:
        return await self.store.queries.get_many(self.jobs)

    async def charged(self, code: str = "UNAVAILABLE") -> int:
        return sum(a.error_code == code for j in await self.all_jobs() for a in j.attempts)

    async def until_terminal(self, limit: float = 3600.0) -> list[Job]:
        async with asyncio.timeout(limit):
            while True:
                jobs = await self.all_jobs()
                if all(j.status.is_terminal for j in jobs):
                    return jobs
                self.changed.clear()
                await self.changed.wait()  # the worker published a change


@asynccontextmanager
async def rig(
    *,
    concurrency: int = 1,
    failures: int = 5,
    probe_interval: float = 5.0,
    max_pause: float = 1800.0,
    store: MemoryJobStore | None = None,
    gateway: SwitchedGateway | None = None,
    claim_ahead: int = 0,
) -> AsyncIterator[Rig]:
    clock = running_loop().now
    store = store or MemoryJobStore(clock=clock)
    gateway = gateway or SwitchedGateway()
    config = WorkerConfig(
        concurrency=concurrency,
        claim_ahead=claim_ahead,
        lease_seconds=30.0,
        poll_interval=1.0,
        backoff=BackoffPolicy(base_delay=1.0, max_delay=300.0),
        breaker=BreakerConfig(failures, probe_interval, max_pause, instance_id="unit"),
    )
    changed = asyncio.Event()

    def published(_jobs: Iterable[Job]) -> None:
        changed.set()

    worker = Worker(store, gateway, published, config, random.Random(3), clock=clock)
    worker.start()
    try:
        yield Rig(store, gateway, worker, changed)
    finally:
        await worker.stop(grace=60.0)


async def _wait(seconds: float) -> None:
    await asyncio.sleep(seconds)


@on_virtual_time
async def test_an_outage_opens_the_circuit_probes_and_closes_without_failing_jobs() -> None:
    async with rig(concurrency=1) as r:
        r.gateway.failure = UNAVAILABLE
        await r.enqueue(20)
        await _wait(60)  # a minute's outage
        (pause,) = await r.store.pauses.dispatch_pauses()
        assert pause.reason is PauseReason.CIRCUIT_OPEN and pause.opened_by == "unit"
        assert "AI gateway unavailable" in pause.last_error
        # Only the failures that opened the circuit were charged; none FAILED.
        assert await r.charged() == 5
        jobs = await r.all_jobs()
        assert all(j.status is JobStatus.PENDING for j in jobs)
        # While open, one probe per probe interval.
        opened_at = r.gateway.calls[4][0]
        probes = [t for t, _ in r.gateway.calls if t > opened_at + 0.2]
        assert 10 <= len(probes) <= 12
        gaps = [b - a for a, b in itertools.pairwise(probes)]
        assert all(gap >= 5.0 - 1e-6 for gap in gaps)
        back = asyncio.get_running_loop().time()
        r.gateway.failure = None
        done = await r.until_terminal()
        assert all(j.status is JobStatus.COMPLETED for j in done)
        assert await r.store.pauses.dispatch_pauses() == []
        last = max(j.completed_at for j in done if j.completed_at is not None)
        assert (last - running_loop().now()).total_seconds() <= 0
        assert asyncio.get_running_loop().time() - back < 20
        assert await r.charged() == 5


@on_virtual_time
async def test_permanent_errors_never_trip_it() -> None:
    async with rig(concurrency=1, failures=2) as r:
        r.gateway.failure = INVALID
        await r.enqueue(6)
        done = await r.until_terminal()
        assert all(j.status is JobStatus.FAILED for j in done)
        assert await r.store.pauses.dispatch_pauses() == []


@on_virtual_time
async def test_a_success_resets_the_count() -> None:
    """Failures must come in a row: one success between them starts the count again."""
    async with rig(concurrency=1, failures=3) as r:
        answers = iter([UNAVAILABLE, UNAVAILABLE, None, UNAVAILABLE, UNAVAILABLE, None] * 3)

        class Alternating(SwitchedGateway):
            async def run(self, job: Job, deadline: float) -> GatewayAnswer:
                self.failure = next(answers, None)
                return await super().run(job, deadline)

        r.worker._gateway = Alternating()
        await r.enqueue(6, max_attempts=5)
        await r.until_terminal()
        assert await r.store.pauses.dispatch_pauses() == []


@on_virtual_time
async def test_jobs_in_flight_when_it_opens_are_given_back_uncharged() -> None:
    async with rig(concurrency=10) as r:
        r.gateway.failure = UNAVAILABLE
        await r.enqueue(10)
        await _wait(1)
        # Ten calls failed at once: five opened the circuit, five were given back.
        assert await r.charged() == 5
        jobs = await r.all_jobs()
        assert sorted(j.attempt_count for j in jobs) == [0] * 5 + [1] * 5
        assert len(await r.store.pauses.dispatch_pauses()) == 1


@on_virtual_time
async def test_a_rate_limit_pauses_the_type_until_the_retry_info_time() -> None:
    limited = GatewayCallError(
        "RESOURCE_EXHAUSTED", "RATE_LIMITED", "5 requests/s", retry_delay_seconds=30.0
    )
    async with rig(concurrency=2) as r:
        r.gateway.failure = limited
        await r.enqueue(6)
        await _wait(1)
        (pause,) = await r.store.pauses.dispatch_pauses()
        assert pause.reason is PauseReason.RATE_LIMITED
        assert (pause.until - pause.since).total_seconds() >= 29.8
        r.gateway.failure = None
        calls_before = len(r.gateway.calls)
        await _wait(25)
        assert len(r.gateway.calls) == calls_before  # nobody called while paused
        done = await r.until_terminal()
        assert all(j.status is JobStatus.COMPLETED for j in done)
        # The one answer that paused it (and one call already in flight) were charged
        # at most; the waiting jobs were not.
        assert await r.charged("RESOURCE_EXHAUSTED") <= 2
        assert min(a.start_time for j in done for a in j.attempts if not a.error_code) >= (
            pause.until
        )


@on_virtual_time
async def test_past_the_max_pause_jobs_fail_saying_since_when() -> None:
    async with rig(concurrency=1, failures=2, probe_interval=5.0, max_pause=30.0) as r:
        r.gateway.failure = UNAVAILABLE
        await r.enqueue(3, max_attempts=2)
        done = await r.until_terminal()
        assert all(j.status is JobStatus.FAILED for j in done)
        (pause,) = await r.store.pauses.dispatch_pauses()
        since = pause.since.strftime("%Y-%m-%dT%H:%M:%SZ")
        last = max(done, key=lambda j: j.failed_at or datetime.min.replace(tzinfo=UTC))
        assert last.error_message == f"AI gateway unavailable since {since}: connection refused"
        assert last.failed_at is not None and (last.failed_at - pause.since).total_seconds() >= 30


@on_virtual_time
async def test_a_pause_opened_by_another_instance_stops_this_one_within_a_second() -> None:
    clock = running_loop().now
    store = MemoryJobStore(clock=clock)
    other = MemoryJobStore(clock=clock, table=store.table)
    async with rig(concurrency=1, store=store) as r:
        await r.enqueue(1)
        await _wait(1)
        await other.pauses.open_pause(
            OpenPauseParams(
                job_type=CARD,
                reason=PauseReason.CIRCUIT_OPEN,
                until=clock() + timedelta(seconds=600),
                last_error="down",
                instance_id="b",
            )
        )
        await _wait(1)
        calls = len(r.gateway.calls)
        await r.enqueue(5)
        await _wait(30)
        assert len(r.gateway.calls) == calls
        assert await other.pauses.close_pause(CARD)
        done = await r.until_terminal()
        assert all(j.status is JobStatus.COMPLETED for j in done)


class PauseSpy(MemoryPauseStore):
    """Records every pause the worker opens."""

    opened: list[PauseReason]

    async def open_pause(self, params: OpenPauseParams) -> DispatchPause:
        self.opened.append(params.reason)
        return await super().open_pause(params)


@on_virtual_time
async def test_failures_in_a_row_between_quick_successes_do_not_open_it() -> None:
    """Six failures in a row, but within a second of a success (a provider failing
    most calls at random, yet answering): pausing it would only slow the work down."""
    cycle = itertools.cycle([None] + [UNAVAILABLE] * 6)

    class Flaky(SwitchedGateway):
        async def run(self, job: Job, deadline: float) -> GatewayAnswer:
            self.failure = next(cycle)
            return await super().run(job, deadline)

    store = MemoryJobStore(clock=running_loop().now)
    spy = store.pauses = PauseSpy(clock=running_loop().now, table=store.table)
    spy.opened = []
    async with rig(concurrency=5, gateway=Flaky(latency=0.05), store=store) as r:
        await r.enqueue(200, max_attempts=10)
        while len(r.gateway.calls) < 140:  # twenty runs of six failures, under load
            r.gateway.called.clear()
            await r.gateway.called.wait()
        assert spy.opened == []


@on_virtual_time
async def test_a_call_in_flight_across_a_pause_opened_and_closed_elsewhere_is_not_charged() -> None:
    """The flaky two-instance test's real cause: this instance's call starts, another
    instance opens the circuit and, after the provider's return, closes it; this
    instance's call then fails (its own connection still backing off). It failed
    during the outage the pause stood for: given back, not charged. (A free slot
    keeps this instance claiming, so it reads the pauses while the call runs; one
    whose slots are all busy for the whole pause never sees it and charges.)"""
    clock = running_loop().now
    store = MemoryJobStore(clock=clock)
    other = MemoryJobStore(clock=clock, table=store.table)
    gateway = SwitchedGateway(failure=UNAVAILABLE, latency=5.0)
    async with rig(concurrency=2, store=store, gateway=gateway, failures=1000) as r:
        await r.enqueue(1)
        await r.gateway.called.wait()  # the call is in flight
        await _wait(1)
        await other.pauses.open_pause(
            OpenPauseParams(
                job_type=CARD,
                reason=PauseReason.CIRCUIT_OPEN,
                until=clock() + timedelta(seconds=600),
                last_error="down",
                instance_id="b",
            )
        )
        await _wait(1.5)  # this instance has read the pause
        assert await other.pauses.close_pause(CARD)
        await _wait(1.0)  # and has read that it closed; the call then fails
        r.gateway.failure = None
        (job,) = await r.until_terminal()
        assert job.status is JobStatus.COMPLETED
        assert await r.charged() == 0


@on_virtual_time
async def test_jobs_claimed_ahead_get_no_call_once_their_type_is_paused() -> None:
    limited = GatewayCallError(
        "RESOURCE_EXHAUSTED", "RATE_LIMITED", "5 requests/s", retry_delay_seconds=30.0
    )
    async with rig(concurrency=2, claim_ahead=2) as r:
        r.gateway.failure = limited
        await r.enqueue(6)
        await _wait(1)
        (pause,) = await r.store.pauses.dispatch_pauses()
        assert pause.reason is PauseReason.RATE_LIMITED
        # The two calls that paused it; the two jobs claimed ahead were given back
        # without a call and uncharged, as if claimed after the pause.
        assert len(r.gateway.calls) == 2
        jobs = await r.all_jobs()
        assert all(j.status is JobStatus.PENDING for j in jobs)
        assert sorted(j.attempt_count for j in jobs) == [0] * 4 + [1] * 2
        r.gateway.failure = None
        done = await r.until_terminal()
        assert all(j.status is JobStatus.COMPLETED for j in done)
        assert await r.charged("RESOURCE_EXHAUSTED") <= 2
