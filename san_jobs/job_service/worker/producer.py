"""The producer: claims due jobs for the free places in the pool (its call slots and
the jobs claimed ahead of them), batched (one statement takes every free place's
worth), probes of open circuits first, then the limited types as their limits allow,
then the rest; and waits, between claims, for a wake-up (a commit that made a job
due), a poll interval, or the next due time it knows of."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime

from san_jobs.job_service.dispatch_breaker import DispatchBreaker
from san_jobs.job_service.domain.errors import StorageError
from san_jobs.job_service.domain.model import Claim, Job, JobType
from san_jobs.job_service.domain.ports import ClaimParams, LimitedClaimParams, WorkerStore
from san_jobs.job_service.worker.config import WorkerConfig, log
from san_jobs.shared.background import BackgroundLoop

# Due times of retries and delayed jobs kept in memory, at most. Only a time before the
# next due-time query (next_due_at, asked at least once per poll interval while a
# place is free) needs one: a later time is left to that query, so a tenant's year of
# delayed jobs costs no memory here; past this many, the next idle asks the database.
MAX_DUE_TIMES = 1_024


class Producer:
    def __init__(
        self,
        store: WorkerStore,
        breaker: DispatchBreaker,
        publish: Callable[[Iterable[Job]], None],
        config: WorkerConfig,
        *,
        clock: Callable[[], datetime],
        in_flight: Callable[[], int],
        start: Callable[[Claim, bool], None],
        rescue: Callable[[], Awaitable[None]],
    ) -> None:
        """`in_flight()`: the jobs the pool holds now. `start(claim, probe)` hands
        each claim over (`probe`: it is the probe of an open circuit). `rescue()`
        runs before each due-time query (the rescuer's: jobs whose last lease
        expired count as due until failed)."""
        self._store = store
        self._breaker = breaker
        self._publish = publish
        self.config = config
        self._clock = clock
        self._in_flight = in_flight
        self._start = start
        self._rescue = rescue
        self._wake = asyncio.Event()
        self._stopping = False
        self._claim_loop = BackgroundLoop("worker-loop", self._run)
        # When jobs become due that no wake-up will announce: the database's last
        # answer to "when is the next job due?" (next_due_at, asked at least once per
        # poll interval), and the retries this worker scheduled since (a heap).
        self._db_due: datetime | None = None
        self._retries_due: list[datetime] = []
        self._last_check = float("-inf")
        self._recheck = False
        # Jobs in flight that are the probe of an open circuit.
        self._probes: set[str] = set()
        # After a claim a limit held back: seconds until the limits may allow more.
        self._limits_wait: float | None = None

    def start(self) -> None:
        self._claim_loop.start()

    async def stop(self) -> None:
        """Claim nothing more; returns once the claim under way (if any) is handed over."""
        self._stopping = True
        self._wake.set()
        await self._claim_loop.stop(cancel=False)

    def wake(self, recheck: bool = False) -> None:
        """A job may be due now (called after the commit that made it so). With
        `recheck`, due times may have changed in ways this instance did not see (another
        instance's writes): ask the database for the next due time again."""
        if recheck:
            self._recheck = True
        # With every place taken there is nothing to claim: the place that frees
        # wakes the loop itself (so enqueues do not spin a full pool).
        if self._in_flight() < self.config.claim_bound or self._stopping:
            self._wake.set()

    def finished(self, job_id: str) -> None:
        """The job's attempt is over: its place in the pool is free."""
        self._probes.discard(job_id)
        self._wake.set()

    def retry_scheduled(self, at: datetime) -> None:
        """A retry this worker wrote, or a delayed job this instance enqueued, is due
        `at`: wake up for it. Kept only when the next due-time queries may not see it
        first (due within two poll intervals: the query runs at most about that far
        apart), and only MAX_DUE_TIMES of them (past it: ask the database at the next
        idle)."""
        if (at - self._clock()).total_seconds() > 2 * self.config.poll_interval:
            return
        if len(self._retries_due) >= MAX_DUE_TIMES:
            self._recheck = True
            return
        heapq.heappush(self._retries_due, at)

    @property
    def due_times_kept(self) -> int:
        """Due times held in memory now (at most MAX_DUE_TIMES)."""
        return len(self._retries_due)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        last_claim = float("-inf")
        while not self._stopping:
            wait = last_claim + self.config.batch_interval - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
                if self._stopping:
                    break  # asked to stop meanwhile: claim nothing more
            last_claim = loop.time()
            free = self.config.claim_bound - self._in_flight()
            claimed = 0
            claimed_at = self._clock()
            if free > 0:
                claims = await self._claim(free)
                claimed = len(claims)
                for claim in claims:
                    self._hand_over(claim)
                if claims:
                    self._publish([c.job for c in claims])
                if claimed == free:
                    continue  # more may be due: claim again at once
            await self._idle(free - claimed > 0, claimed_at)

    def _hand_over(self, claim: Claim) -> None:
        job = claim.job
        # DEBUG: the outcome's line says when and how long (one INFO line less per job).
        log.debug(
            "job_id=%s claimed: %s attempt %d/%d",
            job.id,
            job.job_type.value,
            job.attempt_count,
            job.max_attempts,
        )
        self._start(claim, job.id in self._probes)

    async def _claim(self, free: int) -> list[Claim]:
        """Up to `free` due jobs: first one probe of each open circuit whose probe
        this instance won, then jobs of the types not paused."""
        lease = self.config.lease_seconds
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
            if self.config.limits:
                claims += await self._claim_limited(free - len(claims), skip)
                skip = skip | frozenset(self.config.limits)
            claims += await self._store.claim(
                ClaimParams(
                    limit=free - len(claims),
                    lease_seconds=lease,
                    skip_types=skip,
                    max_per_caller=self.config.max_per_caller,
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
        for job_type, limit in self.config.limits.items():
            if job_type in paused or len(claims) >= free:
                continue
            taken = await self._store.claim_limited(
                LimitedClaimParams(
                    job_type=job_type,
                    limit=free - len(claims),
                    lease_seconds=self.config.lease_seconds,
                    type_limit=limit,
                    max_per_caller=self.config.max_per_caller,
                )
            )
            claims += taken.claims
            if taken.wait_seconds is not None:
                waits.append(taken.wait_seconds)
        self._limits_wait = min(waits, default=None)
        return claims

    async def _idle(self, has_free_slots: bool, claimed_at: datetime) -> None:
        """Wait for a wake-up, a poll interval, or the next known due time."""
        timeout = self.config.poll_interval
        if has_free_slots:
            # The claim made at `claimed_at` took what was due by then (it left free
            # slots): those due times are spent.
            retries = self._retries_due
            while retries and retries[0] <= claimed_at:
                heapq.heappop(retries)
            if self._db_due is not None and self._db_due <= claimed_at:
                self._db_due = None
            loop_time = asyncio.get_running_loop().time()
            if self._recheck or loop_time - self._last_check >= self.config.poll_interval:
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
                timeout = min(self.config.poll_interval, max(timeout, paused_wait))
            if self._limits_wait is not None:
                # Jobs of a limited type are due but over its limit (their due time
                # says "now"): look again when the limit allows more, not at once.
                timeout = min(self.config.poll_interval, self._limits_wait)
        if timeout > 0 and not self._wake.is_set():
            # asyncio.timeout, not wait_for: no extra task per wait (this runs after
            # nearly every claim under load).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
        self._wake.clear()

    async def _check_due(self) -> datetime | None:
        """Fail the jobs whose last lease expired (the rescuer); then when the next
        job is due."""
        try:
            await self._rescue()
            return await self._store.next_due_at()
        except StorageError as error:
            log.warning("due check failed: %s", error)
            return None
