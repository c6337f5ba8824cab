"""The worker pool: claims due jobs, runs each through AiGateway outside any
database transaction, renews leases, and writes the outcome with the claim token.

Bounded concurrency: at most `concurrency` jobs are in flight; claims are batched
(one statement takes every free slot's worth of due jobs), and so is lease renewal
(one statement renews every lease this instance holds, every lease/3 seconds).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import heapq
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from opentelemetry.trace import SpanKind, StatusCode, Tracer

from san_jobs.job_service.dispatch_breaker import BreakerConfig, DispatchBreaker, Verdict
from san_jobs.job_service.domain.backoff import BackoffPolicy
from san_jobs.job_service.domain.claim_limits import TypeLimit
from san_jobs.job_service.domain.dispatch import PauseReason
from san_jobs.job_service.domain.errors import LeaseLostError, StorageError, StorageUnavailableError
from san_jobs.job_service.domain.failures import (
    GatewayCallError,
    describe_gateway_error,
    truncate_error_message,
    unexpected_failure,
)
from san_jobs.job_service.domain.job_types import default_deadlines
from san_jobs.job_service.domain.model import Claim, Failure, GatewayAnswer, Job, JobType
from san_jobs.job_service.domain.ports import (
    AiGateway,
    ClaimParams,
    CompleteParams,
    FailParams,
    JobStore,
    LimitedClaimParams,
    ReleaseParams,
    RenewLeasesParams,
)
from san_jobs.job_service.metrics import (
    CANCELLED,
    COMPLETED,
    FAILED,
    GIVEN_BACK,
    RETRIED,
    SHUTDOWN_CODE,
    NoMetrics,
    WorkerMetrics,
)
from san_jobs.shared.batch_logging import log_each
from san_jobs.shared.trace_context import context_of

log = logging.getLogger("job_service.worker")

T = TypeVar("T")

# Each type's default gateway deadline, from its registry entry (domain/job_types.py).
DEFAULT_DEADLINES: dict[JobType, float] = default_deadlines()
# Writes of an outcome are retried this often while the database is unreachable,
# so a short database blip does not throw away a finished model call.
OUTCOME_WRITE_TRIES = 5
# Why cancel_local stops a call when CancelJob cancelled its job.
CANCELLED_WHY = "the job was cancelled"
# The error code counted when a job claimed ahead is given back because its type was
# paused before its call could start.
PAUSED_CODE = "PAUSED"
# Each completed attempt's line (DEBUG says when it was claimed).
COMPLETED_LINE = "job_id=%s completed: %s attempt %d/%d, gateway call %.0f ms"
# The outcomes of an attempt (its span's job.outcome) that are failures.
FAILED_OUTCOMES = frozenset({"failed", "retrying"})


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    concurrency: int = 10  # --workers (settings.py says why 10)
    # Jobs claimed beyond `concurrency`, each waiting (leased, renewed) for a gateway
    # slot. Without them the pool moves in lockstep under a backlog: every job in
    # flight is claimed, sent, answered and completed as one group, so the claim
    # and completion statements and the gateway take turns instead of overlapping.
    # With them the next group is already claimed when a group's answers arrive,
    # and goes to the gateway while that group's outcomes are written. Calls in
    # flight to the gateway stay at most `concurrency`. 0: claim only free slots.
    claim_ahead: int = 0
    lease_seconds: float = 60.0
    poll_interval: float = 1.0
    # Under load every enqueue commit wakes the worker. Claiming at once after each
    # would run one claim statement per enqueue batch, each costing the database
    # about 0.5 ms plus ~40 µs a row; a claim at most this often takes everything
    # that arrived meanwhile in one statement (a third of the statements at 2,000
    # jobs/s). A wake-up long after the last claim (light load) claims at once.
    batch_interval: float = 0.002
    deadlines: dict[JobType, float] = field(default_factory=lambda: dict(DEFAULT_DEADLINES))
    backoff: BackoffPolicy = field(default_factory=BackoffPolicy)
    # Dispatch pauses: circuit breaking and rate-limit pauses (dispatch_breaker.py).
    breaker: BreakerConfig = field(default_factory=BreakerConfig)
    # Claim limits by job type (--rate-limit, --concurrency-limit; domain/claim_limits.py):
    # each limited type is claimed on its own, as its limits allow; the rest as before.
    limits: dict[JobType, TypeLimit] = field(default_factory=dict)
    # Fair share (--max-running-per-caller): jobs of one caller (requested_by)
    # PROCESSING at most; None: claims take the oldest due jobs whoever asked.
    max_per_caller: int | None = None


class CallSlots:
    """`size` slots for gateway calls. Waiters get them in turn, urgent ones first;
    a slot given back goes straight to the next waiter."""

    def __init__(self, size: int) -> None:
        self._free = size
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def take_now(self) -> bool:
        """Take a slot if one is free and nobody waits for it."""
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return True
        return False

    async def take(self, urgent: bool = False) -> None:
        if self.take_now():
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if urgent:
            self._waiters.appendleft(waiter)
        else:
            self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed a slot just as it was cancelled: pass it on
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1


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
        self._store = store
        self._tracer = tracer
        # Each attempt's wait, run time and outcome (san_jobs.job_service.metrics).
        self._metrics: WorkerMetrics = metrics or NoMetrics()
        self._gateway = gateway
        self._publish = publish
        self._config = config
        self._rng = rng or random.Random()
        self._clock = clock or functools.partial(datetime.now, UTC)
        self._wake = asyncio.Event()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        # Jobs claimed and waiting for a gateway slot (see WorkerConfig.claim_ahead);
        # at most `concurrency` calls hold a slot at once.
        self._claim_bound = config.concurrency + max(config.claim_ahead, 0)
        self._call_slots = CallSlots(config.concurrency)
        self._waiting: set[str] = set()
        # `completed` lines not written yet (_log_completed).
        self._completed_lines: list[tuple[object, ...]] = []
        # Jobs whose gateway call this instance stopped on purpose, and why (for the log).
        self._cancel_requested: dict[str, str] = {}
        self._stopping = False
        self._loop_task: asyncio.Task[None] | None = None
        self._lease_task: asyncio.Task[None] | None = None
        # Claim token of every job in flight whose outcome is not being written yet:
        # the leases the renewal loop keeps alive.
        self._leases: dict[str, str] = {}
        # When jobs become due that no wake-up will announce: the database's last
        # answer to "when is the next job due?" (next_due_at, asked at least once per
        # poll interval), and the retries this worker scheduled since (a heap).
        self._db_due: datetime | None = None
        self._retries_due: list[datetime] = []
        self._last_check = float("-inf")
        self._recheck = False
        self._breaker = DispatchBreaker(
            store, config.breaker, self._clock, lambda: asyncio.get_running_loop().time()
        )
        # Jobs in flight that are the probe of an open circuit.
        self._probes: set[str] = set()
        # After a claim a limit held back: seconds until the limits may allow more.
        self._limits_wait: float | None = None

    # -- control ---------------------------------------------------------------

    def start(self) -> None:
        self._loop_task = asyncio.create_task(self._run(), name="worker-loop")
        self._lease_task = asyncio.create_task(self._renew_leases(), name="worker-leases")

    def wake(self, recheck: bool = False) -> None:
        """A job may be due now (called after the commit that made it so). With
        `recheck`, due times may have changed in ways this instance did not see (another
        instance's writes): ask the database for the next due time again."""
        if recheck:
            self._recheck = True
        # With every slot taken there is nothing to claim: the slot that frees
        # wakes the loop itself (so enqueues do not spin a full pool).
        if len(self._tasks) < self._claim_bound or self._stopping:
            self._wake.set()

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
        for job_id in job_ids:
            task = self._tasks.get(job_id)
            if task is not None and not task.done():
                self._cancel_requested[job_id] = why
                task.cancel()

    def cancel_waiting(self) -> None:
        """Give back every job claimed ahead whose gateway call has not started."""
        for job_id in list(self._waiting):
            task = self._tasks.get(job_id)
            if task is not None:
                task.cancel()

    async def stop(self, grace: float) -> None:
        """Stop claiming; let in-flight jobs finish within `grace` seconds; give the
        rest back as PENDING without charging the attempt."""
        self._stopping = True
        self._wake.set()
        if self._loop_task is not None:
            await self._loop_task
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
        if self._lease_task is not None:  # kept renewing while in-flight jobs finished
            self._lease_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._lease_task

    # -- claim loop ------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        last_claim = float("-inf")
        while not self._stopping:
            wait = last_claim + self._config.batch_interval - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
                if self._stopping:
                    break  # asked to stop meanwhile: claim nothing more
            last_claim = loop.time()
            free = self._claim_bound - len(self._tasks)
            claimed = 0
            claimed_at = self._clock()
            if free > 0:
                claims = await self._claim(free)
                claimed = len(claims)
                for claim in claims:
                    self._start_job(claim)
                if claims:
                    self._publish([c.job for c in claims])
                if claimed == free:
                    continue  # more may be due: claim again at once
            await self._idle(free - claimed > 0, claimed_at)

    async def _claim(self, free: int) -> list[Claim]:
        """Up to `free` due jobs: first one probe of each open circuit whose probe
        this instance won, then jobs of the types not paused."""
        lease = self._config.lease_seconds
        claims: list[Claim] = []
        try:
            await self._breaker.refresh()
            for job_type in await self._breaker.take_probes():
                if len(claims) >= free:
                    break
                probe = await self._store.claim(
                    ClaimParams(limit=1, lease_seconds=lease, only_type=job_type)
                )
                for claim in probe:
                    self._probes.add(claim.job.id)
                    log.info("job_id=%s: probe of %s", claim.job.id, job_type.value)
                claims += probe
            skip = self._breaker.skip_types()
            if self._config.limits:
                claims += await self._claim_limited(free - len(claims), skip)
                skip = skip | frozenset(self._config.limits)
            claims += await self._store.claim(
                ClaimParams(
                    limit=free - len(claims),
                    lease_seconds=lease,
                    skip_types=skip,
                    max_per_caller=self._config.max_per_caller,
                )
            )
        except StorageError as error:  # any: the loop must go on
            log.warning("claim failed: %s", error)
        return claims

    async def _claim_limited(self, free: int, paused: frozenset[JobType]) -> list[Claim]:
        """Up to `free` jobs of the limited types not paused, as their limits allow;
        notes how long until a limit that held a claim back may allow more."""
        claims: list[Claim] = []
        waits: list[float] = []
        for job_type, limit in self._config.limits.items():
            if job_type in paused or len(claims) >= free:
                continue
            taken = await self._store.claim_limited(
                LimitedClaimParams(
                    job_type=job_type,
                    limit=free - len(claims),
                    lease_seconds=self._config.lease_seconds,
                    type_limit=limit,
                    max_per_caller=self._config.max_per_caller,
                )
            )
            claims += taken.claims
            if taken.wait_seconds is not None:
                waits.append(taken.wait_seconds)
        self._limits_wait = min(waits, default=None)
        return claims

    async def _idle(self, has_free_slots: bool, claimed_at: datetime) -> None:
        """Wait for a wake-up, a poll interval, or the next known due time."""
        timeout = self._config.poll_interval
        if has_free_slots:
            # The claim made at `claimed_at` took what was due by then (it left free
            # slots): those due times are spent.
            retries = self._retries_due
            while retries and retries[0] <= claimed_at:
                heapq.heappop(retries)
            if self._db_due is not None and self._db_due <= claimed_at:
                self._db_due = None
            loop_time = asyncio.get_running_loop().time()
            if self._recheck or loop_time - self._last_check >= self._config.poll_interval:
                # Two queries that cost as much as a claim: at most once per poll
                # interval (and when notifications were lost), not after every
                # claim. New and retried jobs are due at once and wake us; retries
                # this worker schedules are in the heap.
                self._recheck = False
                self._last_check = loop_time
                self._db_due = await self._check_due()
            due = min(
                (d for d in (self._db_due, retries[0] if retries else None) if d), default=None
            )
            if due is not None:
                until_due = (due - self._clock()).total_seconds()
                timeout = min(timeout, max(until_due, 0.0))
            paused_wait = self._breaker.wait_hint()
            if paused_wait is not None:
                # Jobs of paused types are due but not claimed: no busy loop; look
                # at the pauses again when they may have changed.
                timeout = min(self._config.poll_interval, max(timeout, paused_wait))
            if self._limits_wait is not None:
                # Jobs of a limited type are due but over its limit (their due time
                # says "now"): look again when the limit allows more, not at once.
                timeout = min(self._config.poll_interval, self._limits_wait)
        if timeout > 0 and not self._wake.is_set():
            # asyncio.timeout, not wait_for: no extra task per wait (this runs after
            # nearly every claim under load).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
        self._wake.clear()

    async def _check_due(self) -> datetime | None:
        """Fail the jobs whose last lease expired; then when the next job is due."""
        try:
            exhausted = await self._store.fail_exhausted_leases()
            if exhausted:
                for job in exhausted:
                    log.warning("job_id=%s failed: lease expired on its last attempt", job.id)
                    self._metrics.outcome(job.job_type, FAILED, job.error_code or "")
                self._publish(exhausted)
            return await self._store.next_due_at()
        except StorageError as error:
            log.warning("due check failed: %s", error)
            return None

    def _start_job(self, claim: Claim) -> None:
        job = claim.job
        # DEBUG: the outcome's line says when and how long (one INFO line less per job).
        log.debug(
            "job_id=%s claimed: %s attempt %d/%d",
            job.id,
            job.job_type.value,
            job.attempt_count,
            job.max_attempts,
        )
        self._leases[job.id] = claim.token
        self._metrics.started(job)
        task = asyncio.create_task(self._run_job(claim), name=f"job-{job.id}")
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
        self._probes.discard(job_id)
        self._leases.pop(job_id, None)
        self._cancel_requested.pop(job_id, None)
        self._wake.set()  # a slot is free

    # -- one job ---------------------------------------------------------------

    async def _run_job(self, claim: Claim) -> None:
        if self._tracer is None:
            await self._attempt(claim)
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
            outcome = await self._attempt(claim)
            span.set_attribute("job.outcome", outcome)
            if outcome in FAILED_OUTCOMES:
                span.set_status(StatusCode.ERROR, outcome)

    async def _attempt(self, claim: Claim) -> str:
        """Run one attempt and record its outcome; which one, as a word: completed,
        retrying, failed, given_back (its type is paused) or cancelled."""
        job, token = claim.job, claim.token
        timeout = self._config.deadlines.get(job.job_type, DEFAULT_DEADLINES[job.job_type])
        record: Coroutine[Any, Any, None]
        try:
            waited = await self._take_call_slot(job)
            started = time.monotonic()
            call_started = self._breaker.call_started()
            try:
                try:
                    if waited and self._paused_meanwhile(job):
                        answer = None  # its type was paused while it waited: no call
                    else:
                        answer = await self._gateway.run(job, timeout)
                except GatewayCallError as error:
                    verdict, failure = await self._breaker_verdict(job, error, call_started)
                    if verdict is Verdict.GIVE_BACK:
                        outcome = "given_back"
                        record = self._give_back(job, token, failure)
                    else:
                        outcome = self._failure_outcome(job, failure)
                        record = self._record_failure(job, token, failure)
                except Exception:  # a bug of ours must not leave the job PROCESSING
                    error_id = uuid.uuid4().hex[:12]
                    log.exception("job_id=%s: unexpected error (error id %s)", job.id, error_id)
                    failure = unexpected_failure(error_id)
                    outcome = self._failure_outcome(job, failure)
                    record = self._record_failure(job, token, failure)
                else:
                    if answer is None:
                        outcome = "given_back"
                        record = self._give_back_paused(job, token)
                    else:
                        await self._breaker_success(job)
                        outcome = "completed"
                        seconds = time.monotonic() - started
                        record = self._record_success(job, token, answer, seconds)
            finally:
                # The call and the breaker's word on it are over (a pause it opened
                # is known before a waiting job looks): the slot goes to a job
                # claimed ahead while this one's outcome is written.
                self._call_slots.release()
            await self._settle(job, token, record)
        except asyncio.CancelledError:
            # Also when cancelled while the outcome was being written: if that write
            # committed, the token no longer matches and giving back does nothing.
            await self._on_cancelled(job, token)
            return "cancelled"
        return outcome

    async def _take_call_slot(self, job: Job) -> bool:
        """Wait for one of the `concurrency` gateway slots; True if the job had to
        wait for it (it was claimed ahead). While it waits, stop() gives it back.
        A probe and a job of a limited type take the next slot that frees, before
        the jobs claimed ahead: they are claimed only when their pause or limit
        allows, and a pool full of other jobs must not hold them back."""
        if self._call_slots.take_now():
            return False
        self._waiting.add(job.id)
        try:
            urgent = job.id in self._probes or job.job_type in self._config.limits
            await self._call_slots.take(urgent)
        finally:
            self._waiting.discard(job.id)
        return True

    def _paused_meanwhile(self, job: Job) -> bool:
        """The job's type was paused after the claim that took it (the claim skipped
        the types paused then): it gets no call, as if claimed after the pause. A
        probe is claimed from a paused type on purpose and runs."""
        return job.id not in self._probes and job.job_type in self._breaker.skip_types()

    async def _give_back_paused(self, job: Job, token: str) -> None:
        released = await self._write_outcome(
            job, lambda: self._store.release(ReleaseParams(job_id=job.id, token=token))
        )
        if released is not None:
            log.info(
                "job_id=%s given back uncharged, %s was paused while it waited for a call",
                job.id,
                job.job_type.value,
            )
            self._metrics.outcome(job.job_type, GIVEN_BACK, PAUSED_CODE)
            self._publish([released])

    @staticmethod
    def _failure_outcome(job: Job, failure: Failure) -> str:
        """retrying or failed: what _record_failure will make of `failure`."""
        retries = failure.transient and job.attempt_count < job.max_attempts
        return "retrying" if retries else "failed"

    async def _settle(self, job: Job, token: str, record: Awaitable[None]) -> None:
        """Record the outcome; if that fails unexpectedly (a bug, a value the
        database refuses, a date out of range), the job still ends in a state the
        contract allows: FAILED with an INTERNAL message, or else PENDING again.
        Never left PROCESSING with a live lease."""
        try:
            await record
            return
        except Exception:  # anything at all: the details go to the log, under an id
            error_id = uuid.uuid4().hex[:12]
            log.exception("job_id=%s: recording the outcome failed (error id %s)", job.id, error_id)
        self._leases.pop(job.id, None)  # whatever happens next, stop renewing the lease
        failure = Failure(
            code="INTERNAL",
            reason="",
            message=truncate_error_message(
                f"Internal error: the outcome could not be recorded (error id {error_id})"
            ),
            transient=False,
        )
        try:
            failed = await self._write_outcome(
                job,
                lambda: self._store.fail(
                    FailParams(
                        job_id=job.id, token=token, failure=failure, retry_at=None, claimed=job
                    )
                ),
            )
        except Exception:
            log.exception("job_id=%s: could not mark the job FAILED; giving it back", job.id)
        else:
            if failed is not None:
                log.error("job_id=%s failed: %s", job.id, failure.message)
                self._metrics.outcome(job.job_type, FAILED, failure.code)
                self._publish([failed])
            return  # written, or the job is no longer ours, or its lease will expire
        try:
            released = await self._store.release(ReleaseParams(job_id=job.id, token=token))
        except Exception:
            log.exception("job_id=%s: could not give the job back; its lease will expire", job.id)
            return
        if released is not None:
            log.warning("job_id=%s given back as PENDING after a failed outcome write", job.id)
            self._metrics.outcome(job.job_type, GIVEN_BACK, failure.code)
            self._publish([released])

    async def _on_cancelled(self, job: Job, token: str) -> None:
        why = self._cancel_requested.get(job.id)
        if why is not None:
            log.info("job_id=%s: gateway call stopped, %s", job.id, why)
            if why == CANCELLED_WHY:  # a lost lease is counted where it was found
                self._metrics.outcome(job.job_type, CANCELLED, "CANCELLED")
            return
        # Shutdown past the grace period: give the job back without charging it.
        try:
            released = await self._store.release(ReleaseParams(job_id=job.id, token=token))
        except StorageError as error:
            log.warning(
                "job_id=%s: could not give back at shutdown (%s); lease will expire", job.id, error
            )
            return
        if released is not None:
            log.info("job_id=%s given back as PENDING at shutdown", job.id)
            self._metrics.outcome(job.job_type, GIVEN_BACK, SHUTDOWN_CODE)
            self._publish([released])

    async def _record_success(
        self, job: Job, token: str, answer: GatewayAnswer, seconds: float
    ) -> None:
        done = await self._write_outcome(
            job,
            lambda: self._store.complete(
                CompleteParams(
                    job_id=job.id,
                    token=token,
                    result=answer.result,
                    usage=answer.usage,
                    claimed=job,
                )
            ),
        )
        if done is not None:
            self._log_completed(
                (job.id, job.job_type.value, job.attempt_count, job.max_attempts, seconds * 1000)
            )
            self._metrics.outcome(job.job_type, COMPLETED)
            self._publish([done])

    def _log_completed(self, args: tuple[object, ...]) -> None:
        """The job's `completed` line. One statement writes many jobs' outcomes, and
        their tasks resume in one turn of the loop: their lines are gathered and
        written in the next turn by log_each, as one write for all (the same lines;
        one record's cost instead of one per job). Traced, each line is logged at
        once: it carries its own attempt's trace id."""
        if self._tracer is not None:
            log.info(COMPLETED_LINE, *args)
            return
        if not self._completed_lines:
            asyncio.get_running_loop().call_soon(self._flush_completed)
        self._completed_lines.append(args)

    def _flush_completed(self) -> None:
        lines, self._completed_lines = self._completed_lines, []
        log_each(log, logging.INFO, COMPLETED_LINE, lines)

    async def _breaker_verdict(
        self, job: Job, error: GatewayCallError, started: float
    ) -> tuple[Verdict, Failure]:
        """The breaker's word on a failed call; charged as before if it fails itself
        (a bug there must not leave the job PROCESSING)."""
        failure = describe_gateway_error(error)
        try:
            return await self._breaker.on_failure(
                job.job_type, job.id, error, failure, started=started
            )
        except Exception:
            log.exception("job_id=%s: the dispatch breaker failed; charging the attempt", job.id)
            return Verdict.CHARGE, failure

    async def _breaker_success(self, job: Job) -> None:
        try:
            await self._breaker.on_success(job.job_type, job.id, job.id in self._probes)
        except Exception:
            log.exception("job_id=%s: the dispatch breaker failed on a success", job.id)

    async def _give_back(self, job: Job, token: str, failure: Failure) -> None:
        """The job's type is paused: PENDING again, the attempt not charged."""
        released = await self._write_outcome(
            job, lambda: self._store.release(ReleaseParams(job_id=job.id, token=token))
        )
        if released is not None:
            log.info(
                "job_id=%s given back uncharged, %s is paused: %s",
                job.id,
                job.job_type.value,
                failure.message,
            )
            self._metrics.outcome(job.job_type, GIVEN_BACK, failure.code)
            self._publish([released])

    async def _record_failure(self, job: Job, token: str, failure: Failure) -> None:
        retry_at: datetime | None = None
        if failure.transient and job.attempt_count < job.max_attempts:
            delay = self._config.backoff.delay(
                job.attempt_count, failure.retry_after_seconds, self._rng
            )
            retry_at = self._clock() + timedelta(seconds=delay)
        stored = await self._write_outcome(
            job,
            lambda: self._store.fail(
                FailParams(
                    job_id=job.id, token=token, failure=failure, retry_at=retry_at, claimed=job
                )
            ),
        )
        if stored is None:
            return
        if retry_at is not None:
            heapq.heappush(self._retries_due, retry_at)
            self._metrics.retry_scheduled(job.id, retry_at)
            self._metrics.outcome(job.job_type, RETRIED, failure.code)
            log.warning(
                "job_id=%s attempt %d failed (%s), retrying in %.1fs: %s",
                job.id,
                job.attempt_count,
                failure.code,
                (retry_at - self._clock()).total_seconds(),
                failure.message,
            )
        else:
            log.error(
                "job_id=%s failed after attempt %d (%s): %s",
                job.id,
                job.attempt_count,
                failure.code,
                failure.message,
            )
            self._metrics.outcome(job.job_type, FAILED, failure.code)
        self._publish([stored])

    async def _write_outcome(self, job: Job, write: Callable[[], Awaitable[T]]) -> T | None:
        # From here the lease is not renewed: once the write commits, a renewal
        # would find the job no longer ours and take it for a lost lease.
        self._leases.pop(job.id, None)
        for attempt in range(1, OUTCOME_WRITE_TRIES + 1):
            try:
                return await write()
            except LeaseLostError:
                log.warning(
                    "job_id=%s: lease lost (cancelled or claimed again); outcome discarded", job.id
                )
                self._metrics.leases_lost()
                return None
            except StorageUnavailableError as error:
                if attempt == OUTCOME_WRITE_TRIES:
                    log.error(
                        "job_id=%s: outcome not written, database unavailable (%s); "
                        "the job runs again when its lease expires",
                        job.id,
                        error,
                    )
                    return None
                await asyncio.sleep(0.2 * 2**attempt)
        return None

    async def _renew_leases(self) -> None:
        """Every lease/3 seconds, push the lease of every job in flight forward (one
        statement for all); stop the gateway calls of jobs that are no longer ours."""
        interval = max(self._config.lease_seconds / 3.0, 0.05)
        while True:
            await asyncio.sleep(interval)
            held = list(self._leases.items())
            if not held:
                continue
            try:
                owned = await self._store.renew_leases(
                    RenewLeasesParams(leases=held, lease_seconds=self._config.lease_seconds)
                )
            except StorageError as error:
                log.warning("lease renewal of %d jobs failed: %s", len(held), error)
                continue
            # Still in flight and not ours any more (claimed again, or cancelled).
            lost = [job_id for job_id, _ in held if job_id not in owned and job_id in self._leases]
            for job_id in lost:
                log.warning("job_id=%s: lease lost; stopping its gateway call", job_id)
            if lost:
                self._metrics.leases_lost(len(lost))
            self.cancel_local(lost, "the job is no longer ours (claimed again, or cancelled)")
