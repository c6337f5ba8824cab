"""The worker's state machine, without a database or a network: the real Worker and
JobApplication over MemoryJobStore and a scripted gateway, on an event loop whose
clock jumps (tests/support/virtual_time.py). Retries and their backoff, RetryInfo,
permanent failures, attempts running out, a lost lease, a cancel during the gateway
call and the give-back at shutdown play out in virtual minutes and real milliseconds.

What needs a real database or real gRPC stays in tests/integration/job_service/
test_worker.py.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest

from san_jobs.job_service.app import JobApplication
from san_jobs.job_service.domain.backoff import BackoffPolicy
from san_jobs.job_service.domain.errors import StorageUnavailableError
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
from san_jobs.job_service.domain.ports import (
    ClaimParams,
    CompleteParams,
    EnqueueParams,
    FailParams,
    ReleaseParams,
    RenewLeasesParams,
)
from san_jobs.job_service.domain.transitions import LEASE_EXPIRED_CODE
from san_jobs.job_service.storage.memory import MemoryJobStore
from san_jobs.job_service.storage.memory_rows import MemoryTable
from san_jobs.job_service.storage.memory_worker import MemoryWorkerStore
from san_jobs.job_service.updates import UpdateHub
from san_jobs.job_service.worker import Worker, WorkerConfig
from tests.support.virtual_time import on_virtual_time, running_loop

RESULT: JsonDict = {"summary": "요약.", "tags": ["scripted"], "embedding": [0.6, 0.8]}
UNAVAILABLE = GatewayCallError("UNAVAILABLE", "", "connection refused")
LEASE = 30.0
# How long a test may run in virtual time before it counts as hung.
VIRTUAL_LIMIT = 3600.0


@dataclass
class Hold:
    """A gateway call that answers `result` once released, or never."""

    result: JsonDict = field(default_factory=lambda: dict(RESULT))
    released: asyncio.Event = field(default_factory=asyncio.Event)


Answer = JsonDict | GatewayAnswer | GatewayCallError | Hold


class ScriptedGateway:
    """The AiGateway port, answering each call as `script(job)` says."""

    def __init__(self, script: Callable[[Job], Answer]) -> None:
        self._script = script
        self.calls: list[tuple[str, int]] = []  # (job id, attempt)
        self.cancelled: list[str] = []
        self._called = asyncio.Event()

    async def run(self, job: Job, deadline: float) -> GatewayAnswer:
        self.calls.append((job.id, job.attempt_count))
        self._called.set()
        answer = self._script(job)
        if isinstance(answer, GatewayCallError):
            raise answer
        if isinstance(answer, Hold):
            try:
                await answer.released.wait()
            except asyncio.CancelledError:
                self.cancelled.append(job.id)
                raise
            return GatewayAnswer(answer.result)
        if isinstance(answer, GatewayAnswer):
            return answer
        return GatewayAnswer(answer)

    async def until_called(self, times: int = 1) -> None:
        while len(self.calls) < times:
            self._called.clear()
            await self._called.wait()


class ScriptedStore(MemoryJobStore):
    """MemoryJobStore whose worker's port is a ScriptedWorker."""

    def __init__(self, clock: Callable[[], datetime]) -> None:
        super().__init__(clock=clock)
        self.worker = ScriptedWorker(clock=clock, table=self.table)


class ScriptedWorker(MemoryWorkerStore):
    """The memory worker's port, recording the outcome writes, whose lease renewals
    can fail (a database this instance cannot reach for a while)."""

    def __init__(self, clock: Callable[[], datetime], table: MemoryTable) -> None:
        super().__init__(clock=clock, table=table)
        self.renewals_down = False
        self.outcome_writes: list[tuple[str, str]] = []  # (method, job id)

    async def renew_leases(self, params: RenewLeasesParams) -> set[str]:
        if self.renewals_down:
            raise StorageUnavailableError("renewals are down")
        return await super().renew_leases(params)

    async def complete(self, params: CompleteParams) -> Job:
        self.outcome_writes.append(("complete", params.job_id))
        return await super().complete(params)

    async def fail(self, params: FailParams) -> Job:
        self.outcome_writes.append(("fail", params.job_id))
        return await super().fail(params)

    async def release(self, params: ReleaseParams) -> Job | None:
        self.outcome_writes.append(("release", params.job_id))
        return await super().release(params)


class Published:
    """What the worker publishes (claims, outcomes, give-backs), in order; lets a test
    wait for a job's state."""

    def __init__(self) -> None:
        self.jobs: list[Job] = []
        self._changed = asyncio.Event()

    def publish(self, jobs: Iterable[Job]) -> None:
        self.jobs.extend(jobs)
        self._changed.set()

    def of(self, job_id: str, status: JobStatus) -> list[Job]:
        return [j for j in self.jobs if j.id == job_id and j.status is status]

    async def terminal(self, job_id: str) -> Job:
        async with asyncio.timeout(VIRTUAL_LIMIT):
            while True:
                done = [j for j in self.jobs if j.id == job_id and j.status.is_terminal]
                if done:
                    return done[-1]
                self._changed.clear()
                await self._changed.wait()


@dataclass
class Service:
    store: ScriptedStore
    gateway: ScriptedGateway
    worker: Worker
    app: JobApplication
    published: Published

    async def enqueue(self, target_id: str = "scrap-1", max_attempts: int = 3) -> Job:
        new = NewJob(
            JobType.CARD_ANALYSIS,
            target_id,
            {"text": "오늘 배운 것."},
            "tester",
            None,
            max_attempts,
        )
        job, _ = await self.app.enqueue(EnqueueParams(new, OnDuplicate.REJECT))
        return job

    def another_instance(self) -> MemoryJobStore:
        """A second JobService's store on the same (in-memory) database."""
        return MemoryJobStore(clock=running_loop().now, table=self.store.table)


@asynccontextmanager
async def running(
    script: Callable[[Job], Answer],
    *,
    concurrency: int = 1,
    backoff: BackoffPolicy | None = None,
    claim_ahead: int = 0,
) -> AsyncIterator[Service]:
    """A started worker (and the JobApplication that feeds it), stopped on exit."""
    clock = running_loop().now
    store = ScriptedStore(clock=clock)
    gateway = ScriptedGateway(script)
    published = Published()
    config = WorkerConfig(
        concurrency=concurrency,
        claim_ahead=claim_ahead,
        lease_seconds=LEASE,
        poll_interval=1.0,
        backoff=backoff or BackoffPolicy(base_delay=2.0, max_delay=300.0),
    )
    worker = Worker(store, gateway, published.publish, config, random.Random(7), clock=clock)
    app = JobApplication(store, UpdateHub(), worker, "unit", attempts_per_round=3)
    worker.start()
    try:
        yield Service(store, gateway, worker, app, published)
    finally:
        await worker.stop(grace=60.0)


def job_task(job_id: str) -> asyncio.Task[object]:
    """The worker's task for a job in flight (the worker names it job-<id>)."""
    (task,) = [t for t in asyncio.all_tasks() if t.get_name() == f"job-{job_id}"]
    return task


async def finished(task: asyncio.Task[object]) -> None:
    """Wait for the worker's task of a job to end; an exception that escaped it is
    raised here."""
    async with asyncio.timeout(VIRTUAL_LIMIT):
        await task


def retry_delays(published: Published, job_id: str) -> list[float]:
    """For each automatic retry: seconds from the failed attempt's end to the retry."""
    delays = []
    for retry in published.of(job_id, JobStatus.PENDING):
        if retry.attempts:  # not the enqueue
            assert retry.next_attempt_at is not None and retry.attempts[-1].end_time is not None
            delays.append((retry.next_attempt_at - retry.attempts[-1].end_time).total_seconds())
    return delays


@on_virtual_time
async def test_transient_failures_retry_with_backoff_then_succeed() -> None:
    async with running(lambda job: UNAVAILABLE if job.attempt_count < 4 else RESULT) as service:
        job = await service.enqueue(max_attempts=5)
        done = await service.published.terminal(job.id)

    assert done.status is JobStatus.COMPLETED and done.result == RESULT
    assert [a.error_code for a in done.attempts] == ["UNAVAILABLE"] * 3 + [""]
    # Equal jitter: after attempt n, a delay within [ceiling/2, ceiling], the ceiling
    # doubling from the base delay (domain/backoff.py).
    delays = retry_delays(service.published, job.id)
    assert len(delays) == 3
    for delay, ceiling in zip(delays, (2.0, 4.0, 8.0), strict=True):
        assert ceiling / 2 <= delay <= ceiling
    # Each retry ran when it was due: not before, and without waiting for a poll.
    retries = [j for j in service.published.of(job.id, JobStatus.PENDING) if j.attempts]
    for retry, attempt in zip(retries, done.attempts[1:], strict=True):
        assert retry.next_attempt_at is not None
        late = attempt.start_time - retry.next_attempt_at
        assert timedelta(0) <= late <= timedelta(milliseconds=10)


@pytest.mark.parametrize(
    ("retry_info", "shortest", "longest"),
    [
        (50.0, 50.0, 50.0),  # above the backoff: the gateway's delay is kept
        (0.5, 1.0, 2.0),  # below it: the backoff's own delay
    ],
)
@on_virtual_time
async def test_retry_info_is_a_lower_bound_of_the_delay(
    retry_info: float, shortest: float, longest: float
) -> None:
    limited = GatewayCallError(
        "RESOURCE_EXHAUSTED", "RATE_LIMITED", "5 requests/s", retry_delay_seconds=retry_info
    )
    async with running(lambda job: limited if job.attempt_count == 1 else RESULT) as service:
        job = await service.enqueue()
        done = await service.published.terminal(job.id)

    assert done.status is JobStatus.COMPLETED
    (delay,) = retry_delays(service.published, job.id)
    assert shortest <= delay <= longest
    first, second = done.attempts
    assert first.end_time is not None
    assert second.start_time - first.end_time >= timedelta(seconds=delay)
    assert first.error_message == "Rate Limit Exceeded (Too many requests): 5 requests/s"


@on_virtual_time
async def test_a_permanent_failure_fails_the_job_at_once() -> None:
    too_long = GatewayCallError(
        "INVALID_ARGUMENT", "TOKEN_LIMIT_EXCEEDED", "Token limit exceeded (9001 > 8192)"
    )
    async with running(lambda _job: too_long) as service:
        job = await service.enqueue(max_attempts=3)
        failed = await service.published.terminal(job.id)

    assert failed.status is JobStatus.FAILED
    assert service.gateway.calls == [(job.id, 1)]
    assert (failed.error_code, failed.error_reason) == ("INVALID_ARGUMENT", "TOKEN_LIMIT_EXCEEDED")
    assert failed.error_message == "Token limit exceeded (9001 > 8192)"
    assert failed.attempt_count == 1 and failed.next_attempt_at is None
    assert failed.failed_at == failed.attempts[0].end_time
    assert service.published.of(job.id, JobStatus.PENDING) == []  # never retried


@on_virtual_time
async def test_transient_failures_fail_the_job_when_attempts_run_out() -> None:
    async with running(lambda _job: UNAVAILABLE) as service:
        job = await service.enqueue(max_attempts=3)
        failed = await service.published.terminal(job.id)

    assert failed.status is JobStatus.FAILED
    assert service.gateway.calls == [(job.id, 1), (job.id, 2), (job.id, 3)]
    assert [(a.attempt, a.error_code) for a in failed.attempts] == [
        (1, "UNAVAILABLE"),
        (2, "UNAVAILABLE"),
        (3, "UNAVAILABLE"),
    ]
    assert failed.error_message == "AI gateway unavailable: connection refused"
    assert failed.next_attempt_at is None and failed.failed_at is not None
    assert len(retry_delays(service.published, job.id)) == 2  # retried twice, not a third time


@on_virtual_time
async def test_an_outcome_after_another_claim_took_the_job_is_dropped() -> None:
    hold = Hold(result={"summary": "stale"})
    async with running(lambda _job: hold) as service:
        job = await service.enqueue()
        await service.gateway.until_called()
        task = job_task(job.id)
        # This instance cannot reach the database to renew; its lease runs out and
        # another instance claims the job again.
        service.store.worker.renewals_down = True
        await asyncio.sleep(LEASE + 1)
        other = service.another_instance()
        (taken,) = await other.worker.claim(ClaimParams(limit=1, lease_seconds=LEASE))
        assert taken.job.id == job.id and taken.job.attempt_count == 2

        hold.released.set()  # the first call answers now: too late
        await finished(task)
        assert service.store.worker.outcome_writes == [("complete", job.id)]
        current = await other.queries.get(job.id)
        assert current.status is JobStatus.PROCESSING and current.claim_token == taken.token
        assert current.result is None
        done = await other.worker.complete(
            CompleteParams(job_id=job.id, token=taken.token, result={"summary": "fresh"})
        )

    assert done.result == {"summary": "fresh"}
    assert [a.error_code for a in done.attempts] == [LEASE_EXPIRED_CODE, ""]
    assert service.published.of(job.id, JobStatus.COMPLETED) == []


@on_virtual_time
async def test_a_lease_found_lost_at_renewal_stops_the_gateway_call() -> None:
    async with running(lambda _job: Hold()) as service:
        job = await service.enqueue()
        await service.gateway.until_called()
        task = job_task(job.id)
        service.store.worker.renewals_down = True
        await asyncio.sleep(LEASE + 1)
        (taken,) = await service.another_instance().worker.claim(
            ClaimParams(limit=1, lease_seconds=LEASE)
        )
        service.store.worker.renewals_down = False
        lost_at = running_loop().time()

        await finished(task)  # the next renewal finds the job taken and stops the call
        assert running_loop().time() - lost_at <= LEASE / 3  # at the first renewal
        assert service.gateway.cancelled == [job.id]
        assert service.store.worker.outcome_writes == []  # no write with the old claim token
        current = await service.store.queries.get(job.id)
        assert current.status is JobStatus.PROCESSING and current.claim_token == taken.token


@on_virtual_time
async def test_cancel_during_the_gateway_call_stops_it_and_writes_no_outcome() -> None:
    async with running(lambda _job: Hold()) as service:
        job = await service.enqueue()
        await service.gateway.until_called()
        task = job_task(job.id)

        await service.app.cancel(job.id, "user left")
        await finished(task)
        assert service.gateway.cancelled == [job.id]
        assert service.store.worker.outcome_writes == []
        assert service.worker.in_flight == 0
        cancelled = await service.store.queries.get(job.id)

    assert cancelled.status is JobStatus.CANCELLED and cancelled.result is None
    assert cancelled.claim_token is None
    (attempt,) = cancelled.attempts
    assert (attempt.error_code, attempt.error_message) == ("CANCELLED", "Cancelled: user left")


@on_virtual_time
async def test_shutdown_lets_calls_finish_within_the_grace_and_gives_back_the_rest() -> None:
    holds = {"quick": Hold(), "stuck": Hold()}
    async with running(lambda job: holds[job.target_id], concurrency=2) as service:
        quick = await service.enqueue("quick")
        stuck = await service.enqueue("stuck")
        await service.gateway.until_called(2)
        waiting = await service.enqueue("waiting")  # no free slot: stays PENDING
        loop = running_loop()
        loop.call_later(2.0, holds["quick"].released.set)  # answers during the grace

        stopping_at = loop.time()
        await service.worker.stop(grace=5.0)
        assert loop.time() - stopping_at == pytest.approx(5.0, abs=0.01)  # the grace, not longer
        jobs = {
            j.target_id: j
            for j in await service.store.queries.get_many([quick.id, stuck.id, waiting.id])
        }

    assert jobs["quick"].status is JobStatus.COMPLETED
    given_back = jobs["stuck"]
    assert service.gateway.cancelled == [stuck.id]
    assert given_back.status is JobStatus.PENDING
    assert given_back.attempt_count == 0 and given_back.attempts == ()  # not charged
    assert given_back.started_at is None and given_back.claim_token is None
    assert ("release", stuck.id) in service.store.worker.outcome_writes
    assert service.published.of(stuck.id, JobStatus.PENDING)[-1] == given_back
    # Nothing was claimed once the stop began, though a slot came free.
    assert jobs["waiting"].status is JobStatus.PENDING and jobs["waiting"].attempt_count == 0


# -- claiming ahead (WorkerConfig.claim_ahead) ---------------------------------------


async def statuses(service: Service, jobs: Sequence[Job]) -> dict[str, JobStatus]:
    return {
        j.target_id: j.status for j in await service.store.queries.get_many([j.id for j in jobs])
    }


@on_virtual_time
async def test_jobs_claimed_ahead_wait_for_a_call_slot_and_run_once_each() -> None:
    holds = {f"t{i}": Hold() for i in range(5)}
    async with running(lambda job: holds[job.target_id], concurrency=2, claim_ahead=2) as service:
        jobs = [await service.enqueue(f"t{i}") for i in range(5)]
        await service.gateway.until_called(2)
        await asyncio.sleep(1.0)  # the claim loop ran again meanwhile
        # Two calls (--workers), two more jobs claimed and waiting, one left PENDING.
        assert len(service.gateway.calls) == 2
        assert service.worker.in_flight == 4
        assert list((await statuses(service, jobs)).values()).count(JobStatus.PROCESSING) == 4

        first = service.gateway.calls[0][0]
        holds[next(j.target_id for j in jobs if j.id == first)].released.set()
        await service.gateway.until_called(3)  # a waiting job took the freed slot
        assert len(service.gateway.calls) == 3
        for hold in holds.values():
            hold.released.set()
        done = [await service.published.terminal(j.id) for j in jobs]

    assert all(j.status is JobStatus.COMPLETED for j in done)
    assert all(j.attempt_count == 1 for j in done)
    assert sorted(job_id for job_id, _ in service.gateway.calls) == sorted(j.id for j in jobs)


@on_virtual_time
async def test_shutdown_gives_back_jobs_claimed_ahead_at_once_uncharged() -> None:
    holds = {"running": Hold(), "ahead": Hold()}
    async with running(lambda job: holds[job.target_id], concurrency=1, claim_ahead=1) as service:
        running_job = await service.enqueue("running")
        await service.gateway.until_called(1)
        ahead = await service.enqueue("ahead")
        await asyncio.sleep(1.0)
        assert (await service.store.queries.get(ahead.id)).status is JobStatus.PROCESSING
        loop = running_loop()
        loop.call_later(2.0, holds["running"].released.set)  # answers during the grace

        await service.worker.stop(grace=5.0)
        jobs = {
            j.target_id: j for j in await service.store.queries.get_many([running_job.id, ahead.id])
        }

    assert jobs["running"].status is JobStatus.COMPLETED
    # Never called: back to PENDING, the attempt not charged, not left PROCESSING.
    given_back = jobs["ahead"]
    assert [job_id for job_id, _ in service.gateway.calls] == [running_job.id]
    assert given_back.status is JobStatus.PENDING
    assert given_back.attempt_count == 0 and given_back.attempts == ()
    assert given_back.claim_token is None
    # Given back when the stop began, not after the running call's answer.
    assert service.store.worker.outcome_writes.index(("release", ahead.id)) < (
        service.store.worker.outcome_writes.index(("complete", running_job.id))
    )


@on_virtual_time
async def test_cancelling_a_job_claimed_ahead_makes_no_call() -> None:
    holds = {"running": Hold(), "ahead": Hold()}
    async with running(lambda job: holds[job.target_id], concurrency=1, claim_ahead=1) as service:
        running_job = await service.enqueue("running")
        await service.gateway.until_called(1)
        ahead = await service.enqueue("ahead")
        await asyncio.sleep(1.0)
        await service.app.cancel(ahead.id, "user left")
        await asyncio.sleep(1.0)
        assert service.worker.in_flight == 1
        holds["running"].released.set()
        await service.published.terminal(running_job.id)
        cancelled = await service.store.queries.get(ahead.id)

    assert [job_id for job_id, _ in service.gateway.calls] == [running_job.id]
    assert cancelled.status is JobStatus.CANCELLED and cancelled.claim_token is None
    assert ("release", ahead.id) not in service.store.worker.outcome_writes


@on_virtual_time
async def test_lease_of_a_job_claimed_ahead_is_renewed_while_it_waits() -> None:
    holds = {"running": Hold(), "ahead": Hold()}
    holds["ahead"].released.set()
    async with running(lambda job: holds[job.target_id], concurrency=1, claim_ahead=1) as service:
        running_job = await service.enqueue("running")
        await service.gateway.until_called(1)
        ahead = await service.enqueue("ahead")
        await asyncio.sleep(LEASE * 3)  # three leases long: renewed, never lost
        waiting = await service.store.queries.get(ahead.id)
        assert waiting.status is JobStatus.PROCESSING and waiting.attempt_count == 1
        holds["running"].released.set()
        done = await service.published.terminal(ahead.id)

    assert done.status is JobStatus.COMPLETED and done.attempt_count == 1
    assert [job_id for job_id, _ in service.gateway.calls] == [running_job.id, ahead.id]
