"""The worker's side of dispatch pauses (domain/dispatch.py): when to stop claiming a
job type, when to probe it, and whether a failed attempt is charged.

The pauses live in the database (PauseStore.dispatch_pauses), shared by every instance;
this instance reads them again before a claim once its copy is `refresh_interval` old,
so a pause another instance opens stops this one within a second.

- A circuit opens (CIRCUIT_OPEN, until = now + probe interval) after `failures`
  transient gateway failures (UNAVAILABLE, DEADLINE_EXCEEDED) in a row for one type,
  once no call of that type has succeeded for QUIET_SECONDS.
  While it is open the type is not claimed, except for one probe per probe interval
  across the cluster (PauseStore.take_probe decides which instance sends it); any
  success of the type closes it.
- A rate-limit answer (RESOURCE_EXHAUSTED, ErrorInfo RATE_LIMITED, RetryInfo) pauses
  the type (RATE_LIMITED) until the RetryInfo time; claiming resumes by itself then.
- Charging: the failures that open a pause are charged as before (they are what
  told us); a transient failure of a type already paused (a call in flight when the
  pause opened, or a probe that failed) is given back uncharged, as at shutdown. So
  an outage charges about `failures` attempts per instance, whatever its length.
- A call that cannot even reach the gateway for UNREACHABLE_AFTER seconds (its
  channel not connected) opens the circuit at once (`on_unreachable`), charging
  nothing: an outage is seen within seconds, not after a deadline.
- Past `max_pause` since the pause began the type is claimed again and failures are
  charged as without the breaker, their message saying since when the provider
  has been unavailable.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from san_jobs.job_service.domain.backoff import bounded_retry_after
from san_jobs.job_service.domain.dispatch import DispatchPause, PauseReason
from san_jobs.job_service.domain.errors import StorageError
from san_jobs.job_service.domain.failures import GatewayCallError, truncate_error_message
from san_jobs.job_service.domain.model import Failure, JobType
from san_jobs.job_service.domain.ports import OpenPauseParams, PauseStore, TakeProbeParams

log = logging.getLogger("job_service.dispatch_breaker")

# Failures that say the provider is down (lease loss is not a gateway failure at all).
CIRCUIT_CODES = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED"})
UNAVAILABLE_PREFIX = "AI gateway unavailable: "
# The circuit opens on --breaker-failures failures in a row only once no call of the
# type has succeeded for this long: a provider that fails half of its calls at random
# answers the other half, and pausing it (a probe interval at least) would slow the
# work down instead of sparing attempts. In an outage nothing succeeds, so this
# delays the opening by at most a second.
QUIET_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    failures: int = 5
    probe_interval: float = 5.0
    max_pause: float = 1800.0
    # A call waiting this long for a connection pauses its type (0: never): the
    # gateway's wait (gateway_client.wait_connected) tells the executor.
    unreachable_after: float = 3.0
    # How old this instance's copy of the pauses may get before a claim.
    refresh_interval: float = 0.5
    instance_id: str = "local"
    # A RetryInfo pause lasts at most this long (the retries' own ceiling,
    # --retry-max-delay): the delay comes from an answer we do not control.
    longest_rate_limit_pause: float = 300.0


class Verdict(enum.Enum):
    CHARGE = "charge"  # record the failure as before (maybe retried)
    GIVE_BACK = "give back"  # the type is paused: release the job uncharged


def is_rate_limit(error: GatewayCallError) -> bool:
    return (
        error.code == "RESOURCE_EXHAUSTED"
        and error.reason == "RATE_LIMITED"
        and error.retry_delay_seconds is not None
    )


def iso_utc(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def unavailable_since(message: str, since: datetime) -> str:
    """The message of a failure charged past --breaker-max-pause."""
    head = f"AI gateway unavailable since {iso_utc(since)}: "
    rest = message.removeprefix(UNAVAILABLE_PREFIX)
    return truncate_error_message(head + rest)


class DispatchBreaker:
    """One instance's view of the pauses, and its count of failures in a row."""

    def __init__(
        self,
        store: PauseStore,
        config: BreakerConfig,
        clock: Callable[[], datetime],
        monotonic: Callable[[], float],
    ) -> None:
        self._store = store
        self._config = config
        self._clock = clock
        self._monotonic = monotonic
        self.pauses: dict[JobType, DispatchPause] = {}
        self._read_at = float("-inf")
        self._reading: asyncio.Future[None] | None = None
        self._streak: dict[JobType, int] = {}
        # When a call of each type last succeeded here (monotonic seconds).
        self._succeeded_at: dict[JobType, float] = {}
        # Types whose pause this instance is writing (failures meanwhile are given back).
        self._opening: set[JobType] = set()
        # When this instance last saw a pause of each type end (monotonic seconds).
        self._ended_at: dict[JobType, float] = {}

    # -- the shared pauses --------------------------------------------------------

    async def refresh(self, *, force: bool = False) -> None:
        """Read the pauses again if this copy is older than refresh_interval (or
        `force`); concurrent callers share one read. A failed read keeps the copy."""
        if not force and self._monotonic() - self._read_at < self._config.refresh_interval:
            return
        if self._reading is not None:
            await asyncio.shield(self._reading)
            return
        self._reading = asyncio.get_running_loop().create_future()
        try:
            rows = await self._store.dispatch_pauses()
            pauses = {p.job_type: p for p in rows}
            self._read_at = self._monotonic()
            for ended in self.pauses.keys() - pauses.keys():
                self._ended_at[ended] = self._read_at
            self.pauses = pauses
        except StorageError as error:
            log.warning("reading the dispatch pauses failed: %s", error)
        finally:
            self._reading.set_result(None)
            self._reading = None

    def _in_force(self, pause: DispatchPause, now: datetime) -> bool:
        """Not yet past --breaker-max-pause."""
        return now - pause.since < timedelta(seconds=self._config.max_pause)

    def skip_types(self) -> frozenset[JobType]:
        """The types not to claim now."""
        now = self._clock()
        return frozenset(
            job_type
            for job_type, pause in self.pauses.items()
            if self._in_force(pause, now)
            and (pause.reason is PauseReason.CIRCUIT_OPEN or pause.until > now)
        )

    def paused_now(self) -> dict[JobType, PauseReason]:
        """skip_types() with each type's reason, for the metrics; called from the
        metrics server's thread, so it reads a copy (the loop may add a pause while
        it runs, and a dict must not change size while it is iterated)."""
        pauses = self.pauses.copy()
        now = self._clock()
        return {
            job_type: pause.reason
            for job_type, pause in pauses.items()
            if self._in_force(pause, now)
            and (pause.reason is PauseReason.CIRCUIT_OPEN or pause.until > now)
        }

    def wait_hint(self) -> float | None:
        """While some type is skipped: how long the claim loop may sleep before the
        pauses must be looked at again (a re-read, a probe or a pause's end)."""
        skipped = self.skip_types()
        if not skipped:
            return None
        now = self._clock()
        ends = [(self.pauses[t].until - now).total_seconds() for t in skipped]
        return max(0.01, min([self._config.refresh_interval, *ends]))

    async def take_probes(self) -> list[JobType]:
        """The open circuits whose probe time has come and whose probe this instance
        won (PauseStore.take_probe): claim one job of each."""
        now = self._clock()
        won: list[JobType] = []
        for job_type, pause in list(self.pauses.items()):
            if (
                pause.reason is not PauseReason.CIRCUIT_OPEN
                or pause.until > now
                or not self._in_force(pause, now)
            ):
                continue
            next_probe = now + timedelta(seconds=self._config.probe_interval)
            try:
                taken = await self._store.take_probe(
                    TakeProbeParams(job_type=job_type, next_probe_at=next_probe)
                )
            except StorageError as error:
                log.warning("taking a probe of %s failed: %s", job_type.value, error)
                continue
            if taken:
                self.pauses[job_type] = replace(pause, until=next_probe)
                won.append(job_type)
        return won

    # -- outcomes -----------------------------------------------------------------

    def call_started(self) -> float:
        """When a gateway call starts, on the breaker's clock (on_failure's `started`)."""
        return self._monotonic()

    async def on_success(self, job_type: JobType, job_id: str, probe: bool) -> None:
        self._streak[job_type] = 0
        self._succeeded_at[job_type] = self._monotonic()
        pause = self.pauses.get(job_type)
        if pause is None and not probe:
            return
        try:
            closed = await self._store.close_pause(job_type)
        except StorageError as error:
            log.warning("job_id=%s: closing the pause of %s failed: %s", job_id, job_type, error)
            return
        if self.pauses.pop(job_type, None) is not None:
            self._ended_at[job_type] = self._monotonic()
        if closed:
            since = iso_utc(pause.since) if pause is not None else "?"
            reason = pause.reason.value if pause is not None else "?"
            log.info(
                "dispatch of %s resumed (%s since %s): job_id=%s succeeded%s",
                job_type.value,
                reason,
                since,
                job_id,
                " (probe)" if probe else "",
            )

    async def on_failure(
        self,
        job_type: JobType,
        job_id: str,
        error: GatewayCallError,
        failure: Failure,
        *,
        started: float,
    ) -> tuple[Verdict, Failure]:
        """Count a failed call (begun at `started`, call_started()); say whether it is
        charged, and with what failure."""
        if not failure.transient:
            self._streak[job_type] = 0  # a permanent error says the provider answers
            return Verdict.CHARGE, failure
        rate_limited = is_rate_limit(error)
        if error.code not in CIRCUIT_CODES and not rate_limited:
            return Verdict.CHARGE, failure
        await self.refresh()
        now = self._clock()
        pause = self.pauses.get(job_type)
        if pause is not None and not self._in_force(pause, now):
            return Verdict.CHARGE, replace(
                failure, message=unavailable_since(failure.message, pause.since)
            )
        # A rate limit whose time is over no longer holds the type back.
        if pause is not None and (pause.reason is PauseReason.CIRCUIT_OPEN or pause.until > now):
            if rate_limited and pause.reason is PauseReason.RATE_LIMITED:
                await self._open(job_type, job_id, PauseReason.RATE_LIMITED, error, failure)
            return Verdict.GIVE_BACK, failure
        if rate_limited:
            await self._open(job_type, job_id, PauseReason.RATE_LIMITED, error, failure)
            return Verdict.CHARGE, failure
        if self._ended_at.get(job_type, float("-inf")) >= started:
            # The call was in flight while the type was paused (maybe by another
            # instance, closed since the provider came back): it failed in the outage
            # the pause stood for, not in a new one. Seen on a second instance whose
            # own connection was still backing off when the first one's probe closed
            # the pause.
            return Verdict.GIVE_BACK, failure
        self._streak[job_type] = self._streak.get(job_type, 0) + 1
        if job_type in self._opening:
            # The failure that reached the count is opening the circuit right now.
            return Verdict.GIVE_BACK, failure
        quiet = self._monotonic() - self._succeeded_at.get(job_type, float("-inf"))
        if self._streak.get(job_type, 0) >= self._config.failures and quiet >= QUIET_SECONDS:
            await self._open(job_type, job_id, PauseReason.CIRCUIT_OPEN, error, failure)
        return Verdict.CHARGE, failure

    async def on_unreachable(self, job_type: JobType, job_id: str, message: str) -> None:
        """A call of `job_type` has waited UNREACHABLE_AFTER seconds for a connection
        to the gateway (gateway_client.wait_connected): the circuit opens now, not when
        the call's deadline has passed, so an outage is shown (stats, /ops, metrics)
        within seconds. Nothing is charged: the call goes on waiting, and if its
        deadline passes first it fails while the type is paused, given back."""
        await self.refresh()
        if job_type in self.skip_types() or job_type in self._opening:
            return
        failure = Failure(
            code="UNAVAILABLE",
            reason="",
            message=truncate_error_message(UNAVAILABLE_PREFIX + message),
            transient=True,
        )
        await self._open(job_type, job_id, PauseReason.CIRCUIT_OPEN, None, failure)

    async def _open(
        self,
        job_type: JobType,
        job_id: str,
        reason: PauseReason,
        error: GatewayCallError | None,
        failure: Failure,
    ) -> None:
        now = self._clock()
        if reason is PauseReason.RATE_LIMITED and error is not None:
            delay = bounded_retry_after(
                error.retry_delay_seconds, self._config.longest_rate_limit_pause
            )
            until = now + timedelta(seconds=delay)
        else:
            until = now + timedelta(seconds=self._config.probe_interval)
        self._opening.add(job_type)
        try:
            pause = await self._store.open_pause(
                OpenPauseParams(
                    job_type=job_type,
                    reason=reason,
                    until=until,
                    last_error=failure.message,
                    instance_id=self._config.instance_id,
                )
            )
        except StorageError as err:
            log.warning("job_id=%s: pausing %s failed: %s", job_id, job_type.value, err)
            return
        finally:
            self._opening.discard(job_type)
            self._streak[job_type] = 0
        self.pauses[job_type] = pause
        log.warning(
            "dispatch of %s paused (%s) since %s until %s, after job_id=%s: %s",
            job_type.value,
            reason.value,
            iso_utc(pause.since),
            iso_utc(pause.until),
            job_id,
            failure.message,
        )
