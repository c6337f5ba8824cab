"""The schedule clients against a real JobService (SQLite and PostgreSQL): the SDK's
six calls and its typed errors, and `jobsctl schedules ...` as a real process; an
interval schedule's period is fired by the server and shows as the last job. The
jobsctl test takes about 2 s per database: each of its five runs is a new Python process
(bad --every and --time-zone values are test_jobsctl_schedules', over the fake)."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest

from san_jobs.client import (
    AsyncJobsClient,
    CardAnalysisInput,
    InvalidRequestError,
    JobType,
    ScheduleExistsError,
    ScheduleNotFoundError,
)
from tests.integration.job_service.conftest import Service
from tests.integration.job_service.test_jobsctl_enqueue_file import jobsctl

TEXT = CardAnalysisInput(text="the daily digest")


async def test_the_sdk_against_jobservice(service: Service) -> None:
    async with AsyncJobsClient(service.runtime.address) as client:
        made = await client.create_schedule(
            "tick", "digest", TEXT, interval=timedelta(seconds=1), priority=2
        )
        assert made.template.job_type == JobType.JOB_TYPE_CARD_ANALYSIS
        assert made.next_fire_time.ToNanoseconds() > made.create_time.ToNanoseconds()
        assert (await client.create_schedule(
            "tick", "digest", TEXT, interval=timedelta(seconds=1), priority=2
        )).create_time == made.create_time  # fmt: skip
        with pytest.raises(ScheduleExistsError) as exists:
            await client.create_schedule("tick", "digest", TEXT, interval=timedelta(seconds=2))
        assert exists.value.schedule_id == "tick"
        with pytest.raises(InvalidRequestError) as bad:
            await client.create_schedule("bad", "digest", TEXT, cron="61 * * * *")
        assert [v.field for v in bad.value.field_violations] == ["schedule.cron"]
        await client.create_schedule("nightly", "other", TEXT, cron="0 21 * * *", paused=True)
        assert [s.schedule_id async for s in client.iter_schedules(page_size=1)] == [
            "nightly",
            "tick",
        ]

        deadline = asyncio.get_running_loop().time() + 10
        while not (tick := await client.get_schedule("tick")).last_job_id:
            assert asyncio.get_running_loop().time() < deadline, "the schedule never fired"
            await asyncio.sleep(0.1)
        assert tick.last_fire_time.ToNanoseconds() >= made.next_fire_time.ToNanoseconds()
        job = await client.get_job(tick.last_job_id)
        assert job.request_id.startswith("schedule:tick:") and job.priority == 2
        assert (await client.pause_schedule("tick")).paused
        assert not (await client.resume_schedule("nightly")).paused
        await client.delete_schedule("tick")
        with pytest.raises(ScheduleNotFoundError) as missing:
            await client.get_schedule("tick")
        assert missing.value.schedule_id == "tick"
        assert (await client.get_job(job.id)).id == job.id  # its job is kept


async def test_jobsctl_schedules_against_jobservice(service: Service) -> None:
    target = service.runtime.address
    create = ["schedules", "create", "card-analysis", "--target-id", "digest", "--text", "t"]
    made = await jobsctl(
        target, *create, "--id", "nightly", "--cron", "30 2 * * *",
        "--time-zone", "Europe/Paris", "--json",
    )  # fmt: skip
    assert made.code == 0, made
    assert json.loads(made.stdout)["timeZone"] == "Europe/Paris"
    listed = await jobsctl(target, "schedules", "list")
    assert listed.code == 0, listed
    row = next(line for line in listed.stdout.splitlines() if "nightly" in line)
    assert "cron 30 2 * * * Europe/Paris" in row and "02:30" not in row  # times are UTC
    paused = await jobsctl(target, "schedules", "pause", "nightly", "--json")
    assert paused.code == 0 and json.loads(paused.stdout)["paused"] is True
    bad = await jobsctl(target, *create, "--id", "x", "--cron", "0 25 * * *")
    assert bad.code == 4, bad
    assert bad.stderr.startswith("jobsctl: error:") and "schedule.cron" in bad.stderr
    assert len(bad.stderr.splitlines()) == 1
    deleted = await jobsctl(target, "schedules", "delete", "nightly")
    assert deleted.code == 0, deleted
    gone = await jobsctl(target, "schedules", "get", "nightly")
    assert gone.code == 3 and "nightly" in gone.stderr, gone
