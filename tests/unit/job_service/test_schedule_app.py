"""The schedules' rules, in the application (schedule_app.py) on the memory store: whose
schedule a caller reaches, the cap per authenticated caller, and when the firing loop
is told to look again. (The RPCs around them: tests/integration/job_service.)"""

from __future__ import annotations

from datetime import timedelta

import pytest

from san_jobs.job_service.domain.errors import InvalidRequestError
from san_jobs.job_service.domain.model import JobType, OnDuplicate
from san_jobs.job_service.domain.schedules import (
    NewSchedule,
    ScheduleDefinition,
    ScheduleNotFoundError,
    ScheduleQuotaError,
    ScheduleTemplate,
)
from san_jobs.job_service.schedule_app import ScheduleApplication, ScheduleCaller
from san_jobs.job_service.storage.memory import MemoryJobStore

ALICE = ScheduleCaller(tenant="alice", own_only=True, authenticated=True)
BOB = ScheduleCaller(tenant="bob", own_only=True, authenticated=True)
OPERATOR = ScheduleCaller(tenant="ops", authenticated=True)


def new_schedule(schedule_id: str, caller: ScheduleCaller, *, paused: bool = False) -> NewSchedule:
    template = ScheduleTemplate(
        job_type=JobType.CARD_ANALYSIS,
        target_id="day",
        request_params={"text": "hello"},
        max_attempts=3,
        priority=3,
        on_duplicate=OnDuplicate.REJECT,
    )
    return NewSchedule(
        schedule_id=schedule_id,
        definition=ScheduleDefinition(template=template, interval=timedelta(minutes=1)),
        paused=paused,
        requested_by=caller.tenant,
        tenant=caller.tenant,
    )


class Replans:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def application(max_per_caller: int | None = None) -> tuple[ScheduleApplication, Replans]:
    replans = Replans()
    app = ScheduleApplication(
        MemoryJobStore().schedules, replan=replans, max_per_caller=max_per_caller
    )
    return app, replans


async def test_a_submitter_reaches_its_own_schedule_only() -> None:
    app, _ = application()
    await app.create(new_schedule("nightly", ALICE), ALICE)
    assert (await app.get("nightly", ALICE)).tenant == "alice"
    for act in (app.get, app.delete, app.pause, app.resume):
        with pytest.raises(ScheduleNotFoundError):
            await act("nightly", BOB)  # as if it did not exist
    page, _ = await app.list(BOB, 10, None)
    assert page == []


async def test_an_operator_reaches_anyones_its_own_first_and_is_told_when_ambiguous() -> None:
    app, _ = application()
    await app.create(new_schedule("nightly", ALICE), ALICE)
    assert (await app.get("nightly", OPERATOR)).tenant == "alice"
    await app.create(new_schedule("nightly", BOB), BOB)
    with pytest.raises(InvalidRequestError, match=r"several callers.*alice, bob"):
        await app.get("nightly", OPERATOR)
    await app.create(new_schedule("nightly", OPERATOR), OPERATOR)
    assert (await app.get("nightly", OPERATOR)).tenant == "ops"
    page, _ = await app.list(OPERATOR, 10, None)
    assert sorted(s.tenant for s in page) == ["alice", "bob", "ops"]


async def test_only_authenticated_callers_are_capped() -> None:
    app, _ = application(max_per_caller=2)
    for n in range(2):
        await app.create(new_schedule(f"s{n}", ALICE), ALICE)
    with pytest.raises(ScheduleQuotaError):
        await app.create(new_schedule("s2", ALICE), ALICE)
    anyone = ScheduleCaller()  # --auth off: one tenant, no cap
    for n in range(3):
        await app.create(new_schedule(f"s{n}", anyone), anyone)


async def test_the_firer_replans_for_a_running_new_schedule_and_a_resumed_one() -> None:
    app, replans = application()
    await app.create(new_schedule("paused", ALICE, paused=True), ALICE)
    assert replans.count == 0
    await app.create(new_schedule("running", ALICE), ALICE)
    assert replans.count == 1
    await app.create(new_schedule("running", ALICE), ALICE)  # a retry: nothing new
    assert replans.count == 1
    assert (await app.pause("running", ALICE)).paused
    assert not (await app.resume("running", ALICE)).paused
    assert replans.count == 2
    await app.delete("running", ALICE)
    with pytest.raises(ScheduleNotFoundError):
        await app.get("running", ALICE)
