"""The completer: writes an attempt's `Outcome` with its claim token (COMPLETED,
retried or FAILED, given back as PENDING), retrying while the database is
unreachable, and says so in the log, the metrics and to the update hub. It never
calls the gateway: the executor does.

Whatever goes wrong while writing, the job ends in a state the contract allows
(FAILED with an INTERNAL message, or else PENDING again): never left PROCESSING
with a live lease."""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime, timedelta
from typing import TypeVar, assert_never

from san_jobs.job_service.domain.errors import LeaseLostError, StorageError, StorageUnavailableError
from san_jobs.job_service.domain.failures import truncate_error_message
from san_jobs.job_service.domain.model import Claim, Failure, Job
from san_jobs.job_service.domain.ports import CompleteParams, FailParams, ReleaseParams, WorkerStore
from san_jobs.job_service.metrics import (
    CANCELLED,
    COMPLETED,
    FAILED,
    GIVEN_BACK,
    RETRIED,
    SHUTDOWN_CODE,
    WorkerMetrics,
)
from san_jobs.job_service.worker.config import (
    COMPLETED_LINE,
    OUTCOME_WRITE_TRIES,
    PAUSED_CODE,
    WorkerConfig,
    log,
)
from san_jobs.job_service.worker.outcome import (
    Cancelled,
    Completed,
    Failed,
    GivenBack,
    LeaseLost,
    Outcome,
    PausedWhileWaiting,
    Retrying,
    ShutDown,
    Written,
)
from san_jobs.shared.batch_logging import log_each

T = TypeVar("T")


def _described(outcome: Written) -> str:
    """What an outcome that could not be recorded was, for the job's error_message."""
    match outcome:
        case Completed():
            return "COMPLETED"
        case Retrying(failure) | Failed(failure):
            return f"{'retrying' if isinstance(outcome, Retrying) else 'FAILED'}: {failure.message}"
        case _:
            return "given back"


class Completer:
    def __init__(
        self,
        store: WorkerStore,
        publish: Callable[[Iterable[Job]], None],
        config: WorkerConfig,
        *,
        clock: Callable[[], datetime],
        rng: random.Random,
        metrics: WorkerMetrics,
        traced: bool,
        stop_renewing: Callable[[str], None],
        retry_scheduled: Callable[[datetime], None],
    ) -> None:
        """`stop_renewing(job_id)`: called before an outcome is written (once it
        commits, a renewal would find the job no longer ours and take it for a lost
        lease). `retry_scheduled(at)`: a retry this worker wrote, due at `at` (no
        wake-up will announce it). `traced`: each attempt has its own span, so each
        `completed` line is logged at once, in its span's trace."""
        self._store = store
        self._publish = publish
        self.config = config
        self._clock = clock
        self._rng = rng
        self._metrics = metrics
        self._traced = traced
        self._stop_renewing = stop_renewing
        self._retry_scheduled = retry_scheduled
        # `completed` lines not written yet (_log_completed).
        self._completed_lines: list[tuple[object, ...]] = []

    async def write(self, claim: Claim, outcome: Outcome) -> None:
        """Write what `claim`'s attempt came to, with its token. A call stopped from
        outside writes nothing (the job is cancelled, or another owner's), except at
        shutdown: given back."""
        job, token = claim.job, claim.token
        match outcome:
            case Cancelled(why) | LeaseLost(why):
                log.info("job_id=%s: gateway call stopped, %s", job.id, why)
                if isinstance(outcome, Cancelled):  # a lost lease is counted where found
                    self._metrics.outcome(job.job_type, CANCELLED, "CANCELLED")
            case ShutDown():
                await self._give_back_at_shutdown(job, token)
            case _:
                await self._settle(job, token, outcome)

    async def _settle(self, job: Job, token: str, outcome: Written) -> None:
        """Record the outcome; if that fails unexpectedly (a bug, a value the
        database refuses, a date out of range), the job still ends in a state the
        contract allows: FAILED with an INTERNAL message, or else PENDING again."""
        try:
            await self._record(job, token, outcome)
            return
        except Exception:  # anything at all: the details go to the log, under an id
            error_id = uuid.uuid4().hex[:12]
            log.exception(
                "job_id=%s: recording the outcome (%s) failed (error id %s)",
                job.id,
                _described(outcome),
                error_id,
            )
        self._stop_renewing(job.id)  # whatever happens next, stop renewing the lease
        failure = Failure(
            code="INTERNAL",
            reason="",
            message=truncate_error_message(
                f"Internal error: the outcome could not be recorded (error id {error_id})"
            ),
            transient=False,
        )
        # Written without the dependents' trigger: what refused the outcome may be the
        # trigger itself (a chain deeper than its recursion allows), and a job given
        # back for it would be claimed and refused again without end.
        end = FailParams(job_id=job.id, token=token, failure=failure, retry_at=None, claimed=job)
        try:
            ended = await self._write_outcome(job, lambda: self._store.end_unsettled(end))
        except Exception:
            log.exception("job_id=%s: could not mark the job FAILED; giving it back", job.id)
        else:
            if ended:
                log.error(
                    "job_id=%s failed: %s (%d dependents cancelled with it)",
                    job.id,
                    failure.message,
                    len(ended) - 1,
                )
                self._metrics.outcome(job.job_type, FAILED, failure.code)
                self._publish(ended)
            return  # written, or the job is no longer ours, or its lease will expire
        try:
            released = await self._release(job, token)
        except Exception:
            log.exception("job_id=%s: could not give the job back; its lease will expire", job.id)
            return
        if released is not None:
            log.warning("job_id=%s given back as PENDING after a failed outcome write", job.id)
            self._metrics.outcome(job.job_type, GIVEN_BACK, failure.code)
            self._publish([released])

    async def _record(self, job: Job, token: str, outcome: Written) -> None:
        match outcome:
            case Completed():
                await self._record_success(job, token, outcome)
            case Retrying(failure) | Failed(failure):
                await self._record_failure(job, token, failure, isinstance(outcome, Retrying))
            case GivenBack(failure):
                await self._give_back(job, token, failure)
            case PausedWhileWaiting():
                await self._give_back_paused(job, token)
            case _:
                assert_never(outcome)

    async def _record_success(self, job: Job, token: str, outcome: Completed) -> None:
        answer = outcome.answer
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
                (
                    job.id,
                    job.job_type.value,
                    job.attempt_count,
                    job.max_attempts,
                    outcome.call_seconds * 1000,
                )
            )
            self._metrics.outcome(job.job_type, COMPLETED)
            self._publish([done])

    def _log_completed(self, args: tuple[object, ...]) -> None:
        """The job's `completed` line. One statement writes many jobs' outcomes, and
        their tasks resume in one turn of the loop: their lines are gathered and
        written in the next turn by log_each, as one write for all (the same lines;
        one record's cost instead of one per job). Traced, each line is logged at
        once: it carries its own attempt's trace id."""
        if self._traced:
            log.info(COMPLETED_LINE, *args)
            return
        if not self._completed_lines:
            asyncio.get_running_loop().call_soon(self._flush_completed)
        self._completed_lines.append(args)

    def _flush_completed(self) -> None:
        lines, self._completed_lines = self._completed_lines, []
        log_each(log, logging.INFO, COMPLETED_LINE, lines)

    async def _record_failure(self, job: Job, token: str, failure: Failure, retries: bool) -> None:
        retry_at: datetime | None = None
        if retries:
            delay = self.config.backoff.delay(
                job.attempt_count, failure.retry_after_seconds, self._rng
            )
            retry_at = self._clock() + timedelta(seconds=delay)
        stored = await self._write_outcome(job, lambda: self._fail(job, token, failure, retry_at))
        if stored is None:
            return
        if retry_at is not None:
            self._retry_scheduled(retry_at)
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

    async def _give_back(self, job: Job, token: str, failure: Failure) -> None:
        """The job's type is paused: PENDING again, the attempt not charged."""
        released = await self._write_outcome(job, lambda: self._release(job, token))
        if released is not None:
            log.info(
                "job_id=%s given back uncharged, %s is paused: %s",
                job.id,
                job.job_type.value,
                failure.message,
            )
            self._metrics.outcome(job.job_type, GIVEN_BACK, failure.code)
            self._publish([released])

    async def _give_back_paused(self, job: Job, token: str) -> None:
        released = await self._write_outcome(job, lambda: self._release(job, token))
        if released is not None:
            log.info(
                "job_id=%s given back uncharged, %s was paused while it waited for a call",
                job.id,
                job.job_type.value,
            )
            self._metrics.outcome(job.job_type, GIVEN_BACK, PAUSED_CODE)
            self._publish([released])

    async def _give_back_at_shutdown(self, job: Job, token: str) -> None:
        """Shutdown past the grace period: give the job back without charging it."""
        try:
            released = await self._release(job, token)
        except StorageError as error:
            log.warning(
                "job_id=%s: could not give back at shutdown (%s); lease will expire", job.id, error
            )
            return
        if released is not None:
            log.info("job_id=%s given back as PENDING at shutdown", job.id)
            self._metrics.outcome(job.job_type, GIVEN_BACK, SHUTDOWN_CODE)
            self._publish([released])

    def _fail(
        self, job: Job, token: str, failure: Failure, retry_at: datetime | None
    ) -> Awaitable[Job]:
        return self._store.fail(
            FailParams(job_id=job.id, token=token, failure=failure, retry_at=retry_at, claimed=job)
        )

    def _release(self, job: Job, token: str) -> Awaitable[Job | None]:
        return self._store.release(ReleaseParams(job_id=job.id, token=token))

    async def _write_outcome(self, job: Job, write: Callable[[], Awaitable[T]]) -> T | None:
        # From here the lease is not renewed: once the write commits, a renewal
        # would find the job no longer ours and take it for a lost lease.
        self._stop_renewing(job.id)
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
