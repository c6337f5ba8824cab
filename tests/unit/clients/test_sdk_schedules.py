"""The SDK's schedule calls, blocking and asyncio, over FakeJobService: what they send
(the template enqueue() would send, without request_id), what they hand back (a
Schedule whose template's job_type reads as its name), pages followed, and the
server's refusals as typed errors."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import grpc
import pytest

from san_jobs.client import (
    CardAnalysisInput,
    InvalidRequestError,
    JobNotFoundError,
    JobType,
    Schedule,
    ScheduleExistsError,
    ScheduleNotFoundError,
    TilGenerationInput,
)
from san_jobs.client.testing import FakeJobService
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

TEXT = CardAnalysisInput(text="Some page text")


def test_the_blocking_client_makes_reads_pauses_and_deletes_one() -> None:
    service = FakeJobService()
    with service.client(token="alice") as client:
        made = client.create_schedule(
            "nightly-til",
            "2026-12-04",
            TilGenerationInput(day="2026-12-04", notes=["a"]),
            cron="0 21 * * *",
            time_zone="Europe/Paris",
            catchup_window=timedelta(hours=1),
            max_attempts=4,
            priority=5,
            paused=True,
        )
        assert isinstance(made, Schedule)
        assert made.template.job_type == JobType.JOB_TYPE_TIL_GENERATION
        assert str(made.template.job_type) == "JOB_TYPE_TIL_GENERATION"  # a typed view
        assert made.cron == "0 21 * * *" and made.time_zone == "Europe/Paris"
        assert made.catchup_window.ToTimedelta() == timedelta(hours=1)
        assert made.paused
        sent = service.calls[-1]
        assert sent.rpc == "CreateSchedule"
        assert isinstance(sent.request, pb.CreateScheduleRequest)
        template = sent.request.schedule.template
        assert template.request_id == ""  # each period's job gets the schedule's
        assert (template.max_attempts, template.priority, template.target_id) == (
            4,
            5,
            "2026-12-04",
        )
        assert sent.metadata == {"authorization": "Bearer alice"}

        assert client.get_schedule("nightly-til") == made
        assert not client.resume_schedule("nightly-til").paused
        assert client.pause_schedule("nightly-til").paused
        client.delete_schedule("nightly-til")
        with pytest.raises(ScheduleNotFoundError) as missing:
            client.get_schedule("nightly-til")
        assert missing.value.schedule_id == "nightly-til"
        assert missing.value.code == grpc.StatusCode.NOT_FOUND
        assert isinstance(missing.value, JobNotFoundError)  # what NOT_FOUND always was


def test_an_interval_schedule_and_its_refusals() -> None:
    service = FakeJobService()
    with service.client() as client:
        made = client.create_schedule("every-10m", "digest", TEXT, interval=timedelta(minutes=10))
        assert made.interval.ToTimedelta() == timedelta(minutes=10)
        assert made.next_fire_time.ToNanoseconds() > made.create_time.ToNanoseconds()
        again = client.create_schedule("every-10m", "digest", TEXT, interval=timedelta(minutes=10))
        assert again.create_time == made.create_time  # a retry returns the stored one
        with pytest.raises(ScheduleExistsError) as exists:
            client.create_schedule("every-10m", "digest", TEXT, interval=timedelta(minutes=5))
        assert exists.value.schedule_id == "every-10m"
        assert exists.value.code == grpc.StatusCode.ALREADY_EXISTS
        with pytest.raises(InvalidRequestError) as bad:
            client.create_schedule("fast", "digest", TEXT, interval=timedelta(milliseconds=10))
        assert [v.field for v in bad.value.field_violations] == ["schedule.interval"]
        with pytest.raises(ValueError, match="exactly one of cron and interval"):
            client.create_schedule("both", "digest", TEXT, cron="* * * * *", interval=timedelta(1))
        with pytest.raises(ValueError, match="exactly one"):
            client.create_schedule("neither", "digest", TEXT)
        for call in (client.pause_schedule, client.resume_schedule, client.delete_schedule):
            with pytest.raises(ScheduleNotFoundError):
                call("nothing")


def test_the_blocking_client_follows_the_pages() -> None:
    service = FakeJobService()
    with service.client() as client:
        for index in range(5):
            client.create_schedule(f"s{index}", "t", TEXT, interval=timedelta(seconds=index + 1))
        page = client.list_schedules(page_size=2)
        assert [s.schedule_id for s in page.schedules] == ["s0", "s1"] and page.next_page_token
        ids = [schedule.schedule_id for schedule in client.iter_schedules(page_size=2)]
    assert ids == ["s0", "s1", "s2", "s3", "s4"]
    assert [call.rpc for call in service.calls].count("ListSchedules") == 1 + 3


def test_the_async_client_does_all_six() -> None:
    async def main() -> None:
        service = FakeJobService()
        async with service.async_client() as client:
            made = await client.create_schedule(
                "a", "t", TEXT, interval=timedelta(seconds=30), job_type=pb.JOB_TYPE_CARD_ANALYSIS
            )
            assert made.template.job_type == JobType.JOB_TYPE_CARD_ANALYSIS
            await client.create_schedule("b", "t", TEXT, cron="*/5 * * * *")
            assert (await client.get_schedule("b")).cron == "*/5 * * * *"
            assert (await client.pause_schedule("a")).paused
            assert not (await client.resume_schedule("a")).paused
            page = await client.list_schedules(page_size=1)
            assert [s.schedule_id for s in page.schedules] == ["a"]
            assert [s.schedule_id async for s in client.iter_schedules(page_size=1)] == ["a", "b"]
            await client.delete_schedule("a")
            with pytest.raises(ScheduleNotFoundError):
                await client.delete_schedule("a")
            with pytest.raises(InvalidRequestError) as bad:
                await client.create_schedule("c", "t", TEXT, cron="0 3 * * *", time_zone="Nope/X")
            assert [v.field for v in bad.value.field_violations] == ["schedule.time_zone"]

    asyncio.run(main())
