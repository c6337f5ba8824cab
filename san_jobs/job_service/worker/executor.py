"""The executor: a claimed job waits for one of the `concurrency` call slots, goes to
AiGateway, and what came back (an answer, a gateway error, an error of ours) becomes
an `Outcome`, with the dispatch breaker's word on it. It never writes to the store:
the completer does."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid

from san_jobs.job_service.dispatch_breaker import DispatchBreaker, Verdict
from san_jobs.job_service.domain.failures import (
    GatewayCallError,
    describe_gateway_error,
    unexpected_failure,
)
from san_jobs.job_service.domain.model import Claim, Failure, Job
from san_jobs.job_service.domain.ports import AiGateway, WatchesConnection
from san_jobs.job_service.domain.priorities import AgeShare
from san_jobs.job_service.worker.config import DEFAULT_DEADLINES, WorkerConfig, log
from san_jobs.job_service.worker.outcome import (
    Completed,
    GivenBack,
    Outcome,
    PausedWhileWaiting,
    charged,
)


class CallSlots:
    """`size` slots for gateway calls; a slot given back goes straight to the next
    waiter. The next waiter: by priority (an `urgent` one first, then the job's
    priority, then the longest waiting), except that one slot in AGE_SHARE goes to the
    longest waiting whatever its priority (domain/priorities.py, the claim's rule).
    Without the priority order, a priority-1 job claimed while the jobs claimed ahead
    wait would wait behind all of them; without the share, a job claimed ahead could
    wait forever behind a stream of more urgent ones."""

    def __init__(self, size: int) -> None:
        self._free = size
        # (rank, arrival, future): few (the jobs claimed ahead), so a scan picks.
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()
        self._share = AgeShare()

    def take_now(self) -> bool:
        """Take a slot if one is free and nobody waits for it."""
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return True
        return False

    async def take(self, urgent: bool = False, priority: int = 3) -> None:
        if self.take_now():
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (0 if urgent else priority, next(self._arrivals), waiter)
        self._waiters.append(entry)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed a slot just as it was cancelled: pass it on
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(entry)
            raise

    def release(self) -> None:
        while self._waiters:
            by_age = self._share.next_by_age()
            # Arrival numbers are unique: min() never compares the futures.
            entry = min(self._waiters, key=lambda w: w[1] if by_age else (w[0], w[1]))
            self._waiters.remove(entry)
            waiter = entry[2]
            if not waiter.done():
                self._share.took(1, by_age)
                waiter.set_result(None)
                return
        self._free += 1


class Executor:
    def __init__(self, gateway: AiGateway, breaker: DispatchBreaker, config: WorkerConfig) -> None:
        self.gateway = gateway
        self.config = config
        self._breaker = breaker
        after = config.breaker.unreachable_after
        if isinstance(gateway, WatchesConnection) and after > 0:
            # A call that cannot reach the gateway pauses its type within seconds.
            gateway.on_unreachable = self._unreachable
            gateway.unreachable_after = after
        self._call_slots = CallSlots(config.concurrency)
        # Jobs claimed ahead and waiting for a call slot (stop() gives them back).
        self.waiting: set[str] = set()

    async def run(self, claim: Claim, probe: bool = False) -> Outcome:
        """Call the gateway for `claim` (once a call slot is free) and say what came of
        it. `probe`: the job is the probe of an open circuit (claimed from a paused type
        on purpose). Cancellation (CancelJob, a lost lease, shutdown) propagates."""
        job = claim.job
        timeout = self.config.deadlines.get(job.job_type, DEFAULT_DEADLINES[job.job_type])
        waited = await self._take_call_slot(job, probe)
        started = time.monotonic()
        call_started = self._breaker.call_started()
        try:
            try:
                if waited and self._paused_meanwhile(job, probe):
                    return PausedWhileWaiting()  # paused while it waited: no call
                answer = await self.gateway.run(job, timeout)
            except GatewayCallError as error:
                verdict, failure = await self._breaker_verdict(job, error, call_started)
                if verdict is Verdict.GIVE_BACK:
                    return GivenBack(failure)
                return charged(job, failure)
            except Exception:  # a bug of ours must not leave the job PROCESSING
                error_id = uuid.uuid4().hex[:12]
                log.exception("job_id=%s: unexpected error (error id %s)", job.id, error_id)
                return charged(job, unexpected_failure(error_id))
            await self._breaker_success(job, probe)
            return Completed(answer, time.monotonic() - started)
        finally:
            # The call and the breaker's word on it are over (a pause it opened
            # is known before a waiting job looks): the slot goes to a job
            # claimed ahead while this one's outcome is written.
            self._call_slots.release()

    async def _take_call_slot(self, job: Job, probe: bool) -> bool:
        """Wait for one of the `concurrency` gateway slots; True if the job had to
        wait for it (it was claimed ahead). While it waits, stop() gives it back.
        A probe and a job of a limited type take the next slot that frees, before
        the jobs claimed ahead: they are claimed only when their pause or limit
        allows, and a pool full of other jobs must not hold them back. The others
        wait in priority order (CallSlots: one slot in ten to the longest waiting)."""
        if self._call_slots.take_now():
            return False
        self.waiting.add(job.id)
        try:
            await self._call_slots.take(
                urgent=probe or job.job_type in self.config.limits, priority=job.priority
            )
        finally:
            self.waiting.discard(job.id)
        return True

    async def _unreachable(self, job: Job, message: str) -> None:
        """The gateway's word that `job`'s call cannot connect: the breaker's to act on
        (a failure of its own must not break the call, which goes on waiting)."""
        try:
            await self._breaker.on_unreachable(job.job_type, job.id, message)
        except Exception:
            log.exception(
                "job_id=%s: the dispatch breaker failed on an unreachable gateway", job.id
            )

    def _paused_meanwhile(self, job: Job, probe: bool) -> bool:
        """The job's type was paused after the claim that took it (the claim skipped
        the types paused then): it gets no call, as if claimed after the pause. A
        probe is claimed from a paused type on purpose and runs."""
        return not probe and job.job_type in self._breaker.skip_types()

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

    async def _breaker_success(self, job: Job, probe: bool) -> None:
        try:
            await self._breaker.on_success(job.job_type, job.id, probe)
        except Exception:
            log.exception("job_id=%s: the dispatch breaker failed on a success", job.id)
