"""Schedules over gRPC on a real JobService (SQLite and PostgreSQL): a 1 s interval
schedule enqueues one job per period with the period's request_id, pause stops it,
resume restarts it; bad schedules get INVALID_ARGUMENT naming the field; the same
id with another definition SCHEDULE_EXISTS, an unknown one SCHEDULE_NOT_FOUND.

About 7 s per database: it watches real periods of a 1 s schedule go by (three
before the pause, two paused, two after resuming)."""

from __future__ import annotations

import asyncio
from datetime import datetime

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from san_jobs.job_service.domain.schedules import MAX_TEMPLATE_BYTES
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from tests.integration.job_service.conftest import Service, StartService
from tests.support.jobs_api import card_request, list_all
from tests.support.rich_errors import rich_error, status_error


def schedule(schedule_id: str = "every-second", **kwargs: object) -> pb.Schedule:
    fields: dict[str, object] = {
        "schedule_id": schedule_id,
        "interval": Duration(seconds=1),
        "template": card_request("scheduled-card", "text"),
    }
    fields.update(kwargs)
    return pb.Schedule(**fields)  # type: ignore[arg-type]


async def scheduled_ids(service: Service) -> list[str]:
    return sorted(
        job.request_id
        for job in await list_all(service.stub)
        if job.request_id.startswith("schedule:every-second:")
    )


def period_of(request_id: str) -> datetime:
    return datetime.fromisoformat(request_id.removeprefix("schedule:every-second:"))


async def test_interval_schedule_fires_pauses_and_resumes(service: Service) -> None:
    stub = service.stub
    created = (await stub.CreateSchedule(pb.CreateScheduleRequest(schedule=schedule()))).schedule
    assert created.next_fire_time.seconds - created.create_time.seconds == 1
    again = (await stub.CreateSchedule(pb.CreateScheduleRequest(schedule=schedule()))).schedule
    assert again == created  # a retry returns the stored schedule
    await asyncio.sleep(3.5)
    fired = await scheduled_ids(service)
    assert len(fired) >= 2
    # One job per period, the periods one second apart, none missing.
    seconds = [period_of(i).timestamp() for i in fired]
    assert seconds == [seconds[0] + k for k in range(len(seconds))]
    got = (await stub.GetSchedule(pb.GetScheduleRequest(schedule_id="every-second"))).schedule
    assert got.last_job_id and got.last_fire_time.seconds >= int(seconds[-1])
    paused = (
        await stub.PauseSchedule(pb.PauseScheduleRequest(schedule_id="every-second"))
    ).schedule
    assert paused.paused
    at_pause = await scheduled_ids(service)
    await asyncio.sleep(2.2)
    assert await scheduled_ids(service) == at_pause  # nothing while paused
    resumed = (
        await stub.ResumeSchedule(pb.ResumeScheduleRequest(schedule_id="every-second"))
    ).schedule
    assert not resumed.paused and resumed.skipped_count >= 2  # the periods passed paused
    await asyncio.sleep(2.0)
    after = await scheduled_ids(service)
    assert len(after) > len(at_pause)
    listed = (await stub.ListSchedules(pb.ListSchedulesRequest())).schedules
    assert [s.schedule_id for s in listed] == ["every-second"]
    await stub.DeleteSchedule(pb.DeleteScheduleRequest(schedule_id="every-second"))
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await stub.GetSchedule(pb.GetScheduleRequest(schedule_id="every-second"))
    assert missing.value.code() is grpc.StatusCode.NOT_FOUND
    assert rich_error(missing.value).reason == "SCHEDULE_NOT_FOUND"


async def test_bad_schedules_name_their_fields(service: Service) -> None:
    stub = service.stub
    bad = pb.Schedule(
        schedule_id="no spaces",
        cron="61 * * * *",
        time_zone="Mars/Olympus",
        template=card_request("", "", request_id="mine"),
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.CreateSchedule(pb.CreateScheduleRequest(schedule=bad))
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    fields = set(rich_error(caught.value).field_violations)
    assert {
        "schedule.schedule_id",
        "schedule.cron",
        "schedule.time_zone",
        "schedule.template.request_id",
        "schedule.template.target_id",
    } <= fields
    with pytest.raises(grpc.aio.AioRpcError) as no_period:
        await stub.CreateSchedule(
            pb.CreateScheduleRequest(schedule=schedule(interval=Duration(nanos=5)))
        )
    assert set(rich_error(no_period.value).field_violations) == {"schedule.interval"}
    # A cron that never matches (issue 42, point 10: it was INTERNAL, StopIteration).
    never = schedule("never")
    never.cron = "0 0 */8 * MON#5"
    with pytest.raises(grpc.aio.AioRpcError) as no_match:
        await stub.CreateSchedule(pb.CreateScheduleRequest(schedule=never))
    assert no_match.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "never matches" in rich_error(no_match.value).field_violations["schedule.cron"]
    await stub.CreateSchedule(
        pb.CreateScheduleRequest(schedule=schedule("nightly", interval=Duration(seconds=86400)))
    )
    with pytest.raises(grpc.aio.AioRpcError) as exists:
        await stub.CreateSchedule(
            pb.CreateScheduleRequest(schedule=schedule("nightly", interval=Duration(seconds=60)))
        )
    assert exists.value.code() is grpc.StatusCode.ALREADY_EXISTS
    assert rich_error(exists.value).reason == "SCHEDULE_EXISTS"


async def test_period_request_ids_are_jobservices_own(service: Service) -> None:
    # Issue 42: a job enqueued in advance under a period's request id stood for that
    # period (the schedule took it as its own and waited for it, period after
    # period). The prefix is JobService's: Enqueue, BatchEnqueue and a template refuse it.
    stub = service.stub
    period_id = "schedule:every-second:2026-12-07T03:00:00Z"
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Enqueue(card_request("early", "text", request_id=period_id))
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    refused = rich_error(caught.value).field_violations
    assert list(refused) == ["request_id"] and "schedule:" in refused["request_id"]
    answer = await stub.BatchEnqueue(
        pb.BatchEnqueueRequest(
            requests=[
                card_request("fine", "text", request_id="schedules:mine"),
                card_request("early", "text", request_id=period_id),
            ]
        )
    )
    assert answer.results[0].response.job.request_id == "schedules:mine"
    item = status_error(answer.results[1].error)
    assert item.code is grpc.StatusCode.INVALID_ARGUMENT
    assert list(item.field_violations) == ["requests[1].request_id"]
    keyed = schedule(template=card_request("scheduled-card", "text", request_id=period_id))
    with pytest.raises(grpc.aio.AioRpcError) as template:
        await stub.CreateSchedule(pb.CreateScheduleRequest(schedule=keyed))
    assert set(rich_error(template.value).field_violations) == {"schedule.template.request_id"}
    assert [job.request_id for job in await list_all(stub)] == ["schedules:mine"]


async def test_a_template_with_dependencies_is_refused(service: Service) -> None:
    # Issue 42, point 9: depends_on in a template was dropped silently; a TIL with no
    # notes of its own was accepted, and every period's job then failed.
    stub = service.stub
    root = (await stub.Enqueue(card_request("root", "text"))).job
    til = pb.EnqueueRequest(
        job_type=pb.JOB_TYPE_TIL_GENERATION,
        target_id="day",
        til_generation_input=pb.TilGenerationInput(day="2026-12-07"),
        depends_on=[root.id],
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.CreateSchedule(pb.CreateScheduleRequest(schedule=schedule(template=til)))
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    fields = rich_error(caught.value).field_violations
    # Both named: the dependencies, and the notes they would have stood in for.
    assert "wait for other jobs" in fields.pop("schedule.template.depends_on")
    assert list(fields) == ["schedule.template.til_generation_input.notes"]
    with_notes = pb.EnqueueRequest()
    with_notes.CopyFrom(til)
    with_notes.til_generation_input.notes.append("a note")
    with pytest.raises(grpc.aio.AioRpcError) as noted:
        await stub.CreateSchedule(pb.CreateScheduleRequest(schedule=schedule(template=with_notes)))
    assert set(rich_error(noted.value).field_violations) == {"schedule.template.depends_on"}
    listed = await stub.ListSchedules(pb.ListSchedulesRequest())
    assert list(listed.schedules) == []


async def test_list_schedules_pages_by_schedule_id(service: Service) -> None:
    stub = service.stub
    for name in ("c-daily", "a-daily", "b-daily"):
        daily = schedule(name, time_zone="Europe/Paris")
        daily.cron = "0 3 * * *"  # instead of the helper's interval (a oneof)
        await stub.CreateSchedule(pb.CreateScheduleRequest(schedule=daily))
    first = await stub.ListSchedules(pb.ListSchedulesRequest(page_size=2))
    assert [s.schedule_id for s in first.schedules] == ["a-daily", "b-daily"]
    assert first.schedules[0].time_zone == "Europe/Paris" and first.next_page_token
    rest = await stub.ListSchedules(
        pb.ListSchedulesRequest(page_size=2, page_token=first.next_page_token)
    )
    assert [s.schedule_id for s in rest.schedules] == ["c-daily"]
    assert rest.next_page_token == ""
    for bad, field in (
        (pb.ListSchedulesRequest(page_size=1001), "page_size"),
        (pb.ListSchedulesRequest(page_token="not-a-token!"), "page_token"),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.ListSchedules(bad)
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert set(rich_error(caught.value).field_violations) == {field}


async def test_list_schedules_pages_fit_the_send_limit(start_service: StartService) -> None:
    """Issue 42, point 4: 15 schedules with 100,000-character templates made the default
    page RESOURCE_EXHAUSTED for the operator and the submitter alike. A page is now cut
    by bytes (as ListJobs' are), and a template is at most MAX_TEMPLATE_BYTES."""
    service = await start_service(max_message_bytes=256 * 1024)
    stub = service.stub
    big = "Lighthouses guide ships. " * 2_400  # 60,000 characters
    for index in range(15):
        schedule = pb.Schedule(
            schedule_id=f"big-{index:02d}",
            cron="0 21 * * *",
            template=card_request(f"t{index}", big),
            paused=True,
        )
        await stub.CreateSchedule(pb.CreateScheduleRequest(schedule=schedule))
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        page = await stub.ListSchedules(pb.ListSchedulesRequest(page_token=token))
        assert page.ByteSize() <= 256 * 1024
        seen += [s.schedule_id for s in page.schedules]
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert seen == [f"big-{index:02d}" for index in range(15)]
    assert pages > 1

    huge = pb.Schedule(
        schedule_id="huge",
        cron="0 21 * * *",
        template=card_request("t", "x" * (MAX_TEMPLATE_BYTES + 1)),
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.CreateSchedule(pb.CreateScheduleRequest(schedule=huge))
    error = rich_error(caught.value)
    assert error.code is grpc.StatusCode.INVALID_ARGUMENT
    assert "schedule.template" in error.field_violations
