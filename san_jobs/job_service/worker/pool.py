"""The Worker: wires the parts and holds the jobs in flight, one task each. A task's
attempt: the executor turns its `Claim` into an `Outcome` (the gateway call), the
completer writes it (the store); the producer claims, the rescuer keeps the leases."""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from opentelemetry.trace import SpanKind, StatusCode, Tracer

from san_jobs.job_service.dispatch_breaker import DispatchBreaker
from san_jobs.job_service.domain.dispatch import PauseReason
from san_jobs.job_service.domain.model import Claim, Job, JobType
from san_jobs.job_service.domain.ports import AiGateway, JobStore
from san_jobs.job_service.metrics import NoMetrics, WorkerMetrics
from san_jobs.job_service.worker.completer import Completer
from san_jobs.job_service.worker.config import (
    CANCELLED_WHY,
    FAILED_OUTCOMES,
    LEASE_LOST_WHY,
    WorkerConfig,
    log,
)
from san_jobs.job_service.worker.executor import Executor
from san_jobs.job_service.worker.outcome import Cancelled, LeaseLost, ShutDown, Stopped
from san_jobs.job_service.worker.producer import Producer
from san_jobs.job_service.worker.rescuer import Rescuer
from san_jobs.shared.trace_context import context_of


class Worker:
    def __init__(
        self,
        store: JobStore,
        gateway: AiGateway,
        publish: Callable[[Iterable[Job]], None],
        config: WorkerConfig,
        rng: random.Random | None = None,
        clock: Callable[[], datetime] | None = None,
        tracer: Tracer | None = None,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        """`clock`: the time the worker compares with the times the store writes
        (retry times, the next due time): give it the store's clock (default: UTC
        now, as the store's). Its waits go by the event loop's clock, so on a test
        loop whose clock the test drives, the worker's timing costs no real time.
        `tracer` (None: tracing off): a `job.attempt` span for each attempt, the child
        of the traceparent stored by the job's Enqueue."""
        clock = clock or functools.partial(datetime.now, UTC)
        self._tracer = tracer
        # Each attempt's wait, run time and outcome (san_jobs.job_service.metrics).
        self._metrics: WorkerMetrics = metrics or NoMetrics()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        # Jobs whose attempt this instance stopped on purpose, and how that ends.
        self._stop_requested: dict[str, Stopped] = {}
        self._breaker = DispatchBreaker(
            store.pauses, config.breaker, clock, lambda: asyncio.get_running_loop().time()
        )
        self._rescuer = Rescuer(
            store.worker,
            publish,
            config,
            self._metrics,
            on_lost=lambda job_ids: self._stop(job_ids, LeaseLost(LEASE_LOST_WHY)),
        )
        self._producer = Producer(
            store.worker,
            self._breaker,
            publish,
            config,
            clock=clock,
            in_flight=lambda: len(self._tasks),
            start=self._start_job,
            rescue=self._rescuer.fail_exhausted,
        )
        self._executor = Executor(gateway, self._breaker, config)
        self._completer = Completer(
            store.worker,
            publish,
            config,
            clock=clock,
            rng=rng or random.Random(),
            metrics=self._metrics,
            traced=tracer is not None,
            stop_renewing=self._rescuer.drop,
            retry_scheduled=self._producer.retry_scheduled,
        )
        self._parts: tuple[Producer | Executor | Completer | Rescuer, ...] = (
            self._producer,
            self._executor,
            self._completer,
            self._rescuer,
        )

    # The settings and the gateway each part reads, swapped on a running worker by
    # tests (a retry policy no datetime can hold; a gateway that alternates).
    @property
    def _config(self) -> WorkerConfig:
        return self._executor.config

    @_config.setter
    def _config(self, config: WorkerConfig) -> None:
        for part in self._parts:
            part.config = config

    @property
    def _gateway(self) -> AiGateway:
        return self._executor.gateway

    @_gateway.setter
    def _gateway(self, gateway: AiGateway) -> None:
        self._executor.gateway = gateway

    # -- control ---------------------------------------------------------------

    def start(self) -> None:
        self._producer.start()
        self._rescuer.start()

    def wake(self, recheck: bool = False) -> None:
        """A job may be due now (called after the commit that made it so). With
        `recheck`, due times may have changed in ways this instance did not see (another
        instance's writes): ask the database for the next due time again."""
        self._producer.wake(recheck)

    def due_later(self, times: Iterable[datetime]) -> None:
        """Delayed jobs this instance enqueued are due at `times` (committed): wake up
        for each then, not at the next poll of next_due_at (up to --poll-interval
        later). Wakes the loop now too, so that a wait under way is cut to the earliest."""
        for at in times:
            self._producer.retry_scheduled(at)
        self._producer.wake()

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def paused_types(self) -> dict[JobType, PauseReason]:
        """The job types not claimed now, and why, as this instance sees the shared
        pauses (no query). Safe to call from another thread (the metrics server's)."""
        return self._breaker.paused_now()

    def cancel_local(self, job_ids: Iterable[str], why: str = CANCELLED_WHY) -> None:
        """CancelJob made these jobs CANCELLED (or, says `why`, they are no longer
        ours): stop their gateway calls if they run here."""
        self._stop(job_ids, Cancelled(why) if why == CANCELLED_WHY else LeaseLost(why))

    def cancel_waiting(self) -> None:
        """Give back every job claimed ahead whose gateway call has not started."""
        for job_id in list(self._executor.waiting):
            task = self._tasks.get(job_id)
            if task is not None:
                task.cancel()

    async def stop(self, grace: float) -> None:
        """Stop claiming; let in-flight jobs finish within `grace` seconds; give the
        rest back as PENDING without charging the attempt."""
        await self._producer.stop()
        # Claimed ahead, never started: back to PENDING now (uncharged, as at the
        # end of the grace period), not run during it.
        self.cancel_waiting()
        tasks = list(self._tasks.values())
        if tasks:
            log.info("waiting up to %.1fs for %d in-flight jobs", grace, len(tasks))
            _, pending = await asyncio.wait(tasks, timeout=grace)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        await self._rescuer.stop()  # kept renewing while in-flight jobs finished

    def _stop(self, job_ids: Iterable[str], stopped: Cancelled | LeaseLost) -> None:
        for job_id in job_ids:
            task = self._tasks.get(job_id)
            if task is not None and not task.done():
                self._stop_requested[job_id] = stopped
                task.cancel()

    # -- one job ---------------------------------------------------------------

    def _start_job(self, claim: Claim, probe: bool) -> None:
        job = claim.job
        self._rescuer.hold(job.id, claim.token)
        self._metrics.started(job)
        task = asyncio.create_task(self._run_job(claim, probe), name=f"job-{job.id}")
        self._tasks[job.id] = task
        # The loop's clock, not time.monotonic(): the same in production, and on a
        # test's virtual-time loop the run is measured in its time.
        started = asyncio.get_running_loop().time()
        task.add_done_callback(functools.partial(self._job_done, job.id, job.job_type, started))

    def _job_done(
        self, job_id: str, job_type: JobType, started: float, _task: asyncio.Task[None]
    ) -> None:
        # The attempt's run: from its claim to its outcome written, whatever it was.
        self._metrics.ran(job_type, asyncio.get_running_loop().time() - started)
        self._tasks.pop(job_id, None)
        self._rescuer.drop(job_id)
        self._stop_requested.pop(job_id, None)
        self._producer.finished(job_id)  # a place is free

    async def _run_job(self, claim: Claim, probe: bool) -> None:
        if self._tracer is None:
            await self._attempt(claim, probe)
            return
        job = claim.job
        # The parent is the Enqueue call's span, stored with the job: the attempt
        # joins its caller's trace, whenever and wherever it runs.
        with self._tracer.start_as_current_span(
            "job.attempt",
            context=context_of(job.traceparent),
            kind=SpanKind.CONSUMER,
            attributes={
                "job.id": job.id,
                "job.type": job.job_type.value,
                "job.attempt": job.attempt_count,
            },
        ) as span:
            outcome = await self._attempt(claim, probe)
            span.set_attribute("job.outcome", outcome)
            if outcome in FAILED_OUTCOMES:
                span.set_status(StatusCode.ERROR, outcome)

    async def _attempt(self, claim: Claim, probe: bool) -> str:
        """Run one attempt and record its outcome; which one, as a word: completed,
        retrying, failed, given_back (its type is paused) or cancelled."""
        try:
            outcome = await self._executor.run(claim, probe)
            await self._completer.write(claim, outcome)
        except asyncio.CancelledError:
            # Also when cancelled while the outcome was being written: if that write
            # committed, the token no longer matches and giving back does nothing.
            stopped = self._stop_requested.get(claim.job.id, ShutDown())
            await self._completer.write(claim, stopped)
            return stopped.word
        return outcome.word
