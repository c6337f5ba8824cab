"""The firing loop of schedules: one per instance, every instance running one.

It sleeps until the earliest next_fire_at of a running schedule, or at most
POLL_SECONDS (other instances' new or resumed schedules are learnt at that poll: on
a shared database a schedule created elsewhere may start its first period up to
that late), or until `replan()` (this instance's CreateSchedule or ResumeSchedule).
Then it fires every due schedule (storage/schedules.py: the instance whose
conditional UPDATE wins a period fires it; the others' find nothing to do) and
hands each new job to the application, which publishes it and wakes the worker.

A period that waits for its previous job (a catch-up window) is not due, and its
next_fire_at, in the past, is not what the loop sleeps until (issue 42: 100 such
schedules had every instance run a full round every WAIT_SECONDS, and took the
whole round from other tenants'): the store leaves it out until that job has ended,
which the next poll sees, or until its slow look again (WAITING_RECHECK).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from san_jobs.job_service.domain.errors import StorageError
from san_jobs.job_service.domain.model import Job
from san_jobs.job_service.domain.ports import FireDueParams, ScheduleStore
from san_jobs.job_service.domain.schedules import FireOutcome, rfc3339
from san_jobs.shared.background import BackgroundLoop

log = logging.getLogger("job_service.schedules")

POLL_SECONDS = 1.0
WAIT_SECONDS = 0.1
# After a storage error: wait this long before trying again.
ERROR_BACKOFF_SECONDS = 2.0


class ScheduleFirer:
    def __init__(
        self,
        store: ScheduleStore,
        on_enqueued: Callable[[Job], Awaitable[None]],
        *,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self._store = store
        self._on_enqueued = on_enqueued
        self._poll = poll_seconds
        self._wake = asyncio.Event()
        self._loop = BackgroundLoop(
            "schedule-firer", self._run, restart_after=ERROR_BACKOFF_SECONDS
        )

    def start(self) -> None:
        self._loop.start()

    def replan(self) -> None:
        """A schedule was created or resumed here: look at the next fire time again."""
        self._wake.set()

    async def stop(self) -> None:
        await self._loop.stop()

    async def _run(self) -> None:
        while True:
            try:
                outcomes = await self._store.fire_due_schedules(FireDueParams())
                for outcome in outcomes:
                    await self._report(outcome)
                if any(not outcome.waiting for outcome in outcomes):
                    continue  # a catch-up round may have left the next period due
                upcoming = await self._store.next_schedule_fire_at()
            except StorageError as error:
                log.warning("schedules: firing round failed, trying again: %s", error)
                await asyncio.sleep(ERROR_BACKOFF_SECONDS)
                continue
            delay = self._poll
            if upcoming is not None:
                # At least WAIT_SECONDS: a period already due (one whose previous job
                # just ended, or a round lost to another instance) is not run in a loop.
                ahead = (upcoming - datetime.now(UTC)).total_seconds()
                delay = min(delay, max(WAIT_SECONDS, ahead))
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)

    async def _report(self, outcome: FireOutcome) -> None:
        schedule = outcome.schedule
        period = "-" if outcome.period is None else rfc3339(outcome.period)
        if outcome.waiting:
            if outcome.skipped:
                log.info(
                    "schedule %s (of %s) skipped %d period(s) older than its catch-up window",
                    schedule.schedule_id,
                    schedule.requested_by or "-",
                    outcome.skipped,
                )
            return  # said once it fires (or is skipped), not at every look
        if outcome.job is None:
            log.info(
                "schedule %s (of %s) skipped period %s: %s; %d period(s) skipped this round",
                schedule.schedule_id,
                schedule.requested_by or "-",
                period,
                outcome.reason,
                outcome.skipped,
            )
            return
        if outcome.skipped:
            log.info(
                "schedule %s (of %s) skipped %d missed period(s) before %s",
                schedule.schedule_id,
                schedule.requested_by or "-",
                outcome.skipped,
                period,
            )
        log.info(
            "job_id=%s enqueued by schedule %s (of %s) for period %s%s",
            outcome.job.id,
            schedule.schedule_id,
            schedule.requested_by or "-",
            period,
            " (already enqueued: the same job)" if outcome.deduplicated else "",
        )
        if not outcome.deduplicated:
            await self._on_enqueued(outcome.job)
