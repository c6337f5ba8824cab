"""The schedule firer outlives a bug in one round: a round that raised anything but a
StorageError ended its task in silence, and no schedule of the instance fired again
until a restart. Now the error is logged (naming the loop) and the rounds go on."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

import pytest

from san_jobs.job_service import schedule_firer
from san_jobs.job_service.domain.model import Job
from san_jobs.job_service.domain.ports import FireDueParams
from san_jobs.job_service.schedule_firer import ScheduleFirer


class OnceBrokenStore:
    """fire_due_schedules raises a bug's error once, then finds nothing due."""

    def __init__(self) -> None:
        self.rounds = 0
        self.went_on = asyncio.Event()

    async def fire_due_schedules(self, params: FireDueParams) -> list[object]:
        self.rounds += 1
        if self.rounds == 1:
            raise ZeroDivisionError("a bug in one round")
        self.went_on.set()
        return []

    async def next_schedule_fire_at(self) -> datetime | None:
        return None


async def test_a_round_that_raises_is_logged_and_the_rounds_go_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(schedule_firer, "ERROR_BACKOFF_SECONDS", 0.01)
    store = OnceBrokenStore()

    async def enqueued(_job: Job) -> None:
        return None

    firer = ScheduleFirer(store, enqueued, poll_seconds=0.05)  # type: ignore[arg-type]
    with caplog.at_level(logging.ERROR):
        firer.start()
        try:
            await asyncio.wait_for(store.went_on.wait(), 5)
        finally:
            await firer.stop()
    assert store.rounds >= 2
    assert any("schedule-firer failed" in r.getMessage() for r in caplog.records)
