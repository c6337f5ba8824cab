"""FakeJobService's schedules: stored per caller, checked and refused as JobService
does (field names, reasons, metadata), paused and resumed, listed by id a page at a
time, and fired when the test says so."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from san_jobs.client import CardAnalysisInput, CardAnalysisResult, InvalidRequestError
from san_jobs.client._errors import ScheduleExistsError, ScheduleNotFoundError
from san_jobs.client.testing import FakeJobService
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from tests.support.rich_errors import status_error


def _schedule(schedule_id: str = "nightly", **fields: object) -> pb.Schedule:
    template = pb.EnqueueRequest(
        job_type=pb.JOB_TYPE_CARD_ANALYSIS,
        target_id="digest",
        card_analysis_input=CardAnalysisInput(text="today"),
    )
    schedule = pb.Schedule(schedule_id=schedule_id, template=template)
    if not fields:
        schedule.interval.FromSeconds(60)
    for name, value in fields.items():
        if isinstance(value, Duration):
            getattr(schedule, name).CopyFrom(value)
        else:
            setattr(schedule, name, value)
    return schedule


def _create(service: FakeJobService, schedule: pb.Schedule, caller: str = "") -> pb.Schedule:
    request = pb.CreateScheduleRequest(schedule=schedule)
    return service.create_schedule(request, caller).schedule


def _fields(error: InvalidRequestError) -> list[str]:
    return [violation.field for violation in error.field_violations]


def test_a_schedule_round_trips() -> None:
    service = FakeJobService()
    before = datetime.now(UTC)
    created = _create(service, _schedule())
    assert created.schedule_id == "nightly"
    assert created.interval.ToSeconds() == 60
    assert created.template.card_analysis_input.text == "today"
    assert created.create_time.ToDatetime(UTC) >= before - timedelta(seconds=1)
    # The next period starts one interval after the created second (anchor + k * interval).
    assert created.next_fire_time.ToSeconds() == created.create_time.seconds + 60
    assert created.next_fire_time.nanos == 0
    got = service.get_schedule(pb.GetScheduleRequest(schedule_id="nightly")).schedule
    assert got == created

    paused = service.pause_schedule(pb.PauseScheduleRequest(schedule_id="nightly")).schedule
    assert paused.paused and not paused.HasField("next_fire_time")
    again = service.pause_schedule(pb.PauseScheduleRequest(schedule_id="nightly")).schedule
    assert again.paused  # pausing a paused schedule is a no-op
    resumed = service.resume_schedule(pb.ResumeScheduleRequest(schedule_id="nightly")).schedule
    assert not resumed.paused and resumed.HasField("next_fire_time")

    service.delete_schedule(pb.DeleteScheduleRequest(schedule_id="nightly"))
    with pytest.raises(ScheduleNotFoundError):
        service.get_schedule(pb.GetScheduleRequest(schedule_id="nightly"))


def test_the_same_definition_returns_the_stored_one_another_is_refused() -> None:
    service = FakeJobService()
    first = _create(service, _schedule())
    service.pause_schedule(pb.PauseScheduleRequest(schedule_id="nightly"))
    retried = _create(service, _schedule())  # a retry of the create
    assert retried.create_time == first.create_time and retried.paused
    other = _schedule()
    other.interval.FromSeconds(120)
    with pytest.raises(ScheduleExistsError) as refused:
        _create(service, other)
    assert refused.value.code == grpc.StatusCode.ALREADY_EXISTS
    assert refused.value.reason == "SCHEDULE_EXISTS"
    assert refused.value.schedule_id == "nightly"


def test_unknown_ids_are_not_found_with_their_id() -> None:
    service = FakeJobService()
    calls: list[Callable[[], object]] = [
        lambda: service.get_schedule(pb.GetScheduleRequest(schedule_id="gone")),
        lambda: service.delete_schedule(pb.DeleteScheduleRequest(schedule_id="gone")),
        lambda: service.pause_schedule(pb.PauseScheduleRequest(schedule_id="gone")),
        lambda: service.resume_schedule(pb.ResumeScheduleRequest(schedule_id="gone")),
    ]
    for call in calls:
        with pytest.raises(ScheduleNotFoundError) as missing:
            call()
        assert missing.value.code == grpc.StatusCode.NOT_FOUND
        assert missing.value.reason == "SCHEDULE_NOT_FOUND"
        assert missing.value.metadata == {"scheduleId": "gone"}


def test_schedules_are_the_callers_own() -> None:
    service = FakeJobService()
    _create(service, _schedule(), caller="alice")
    with pytest.raises(ScheduleNotFoundError):
        service.get_schedule(pb.GetScheduleRequest(schedule_id="nightly"), "bob")
    other = _schedule()
    other.interval.FromSeconds(5)
    assert _create(service, other, caller="bob").interval.ToSeconds() == 5  # no clash
    listed = service.list_schedules(pb.ListSchedulesRequest(), "alice").schedules
    assert [s.interval.ToSeconds() for s in listed] == [60]


def _refused(schedule: pb.Schedule) -> list[str]:
    with pytest.raises(InvalidRequestError) as refused:
        _create(FakeJobService(), schedule)
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    return _fields(refused.value)


def test_bad_schedules_name_their_fields() -> None:
    half = Duration()
    half.FromMilliseconds(500)
    assert _refused(_schedule("bad id!", cron="0 3 * * *")) == ["schedule.schedule_id"]
    assert _refused(_schedule("x" * 129, cron="0 3 * * *")) == ["schedule.schedule_id"]
    assert _refused(_schedule("a.b_c-d:e", interval=half)) == ["schedule.interval"]
    assert _refused(_schedule("p", cron="0 3 * *")) == ["schedule.cron"]
    assert _refused(_schedule("p", cron="0 3 * * *", time_zone="Mars/Base")) == [
        "schedule.time_zone"
    ]
    no_period = _schedule("p", time_zone="")
    no_period.ClearField("period")
    assert _refused(no_period) == ["schedule.cron"]
    keyed = _schedule()
    keyed.template.request_id = "mine"
    assert _refused(keyed) == ["schedule.template.request_id"]
    dependent = _schedule()
    dependent.template.depends_on.append("0190a1b2-0000-7000-8000-000000000001")
    assert _refused(dependent) == ["schedule.template.depends_on"]
    untyped = _schedule()
    untyped.template.job_type = pb.JOB_TYPE_UNSPECIFIED
    assert _refused(untyped) == ["schedule.template.job_type"]
    bare = _schedule()
    bare.ClearField("template")
    assert _refused(bare) == ["schedule.template"]


def test_list_pages_by_schedule_id() -> None:
    service = FakeJobService()
    for name in ("c", "a", "e", "b", "d"):
        _create(service, _schedule(name))
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        page = service.list_schedules(pb.ListSchedulesRequest(page_size=2, page_token=token))
        seen.extend(s.schedule_id for s in page.schedules)
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert seen == ["a", "b", "c", "d", "e"] and pages == 3
    with pytest.raises(InvalidRequestError) as refused:
        service.list_schedules(pb.ListSchedulesRequest(page_size=1001))
    assert _fields(refused.value) == ["page_size"]


def test_fire_schedule_enqueues_the_period_once() -> None:
    service = FakeJobService()
    _create(service, _schedule("daily", cron="0 3 * * *", time_zone="Europe/Paris"))
    period = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    job = service.fire_schedule("daily", period_start=period)
    assert job is not None
    assert job.request_id == "schedule:daily:2026-03-29T01:00:00Z"
    assert job.target_id == "digest" and job.status == pb.JOB_STATUS_PENDING
    again = service.fire_schedule("daily", period_start=period)
    assert again is not None and again.id == job.id  # a period fired twice: one job
    stored = service.get_schedule(pb.GetScheduleRequest(schedule_id="daily")).schedule
    assert stored.last_job_id == job.id
    assert stored.last_fire_time.ToDatetime(UTC) == period
    assert not stored.HasField("next_fire_time")  # the fake reads no crontab

    # The period's job is still active: the next period is skipped, as an overlap.
    assert service.fire_schedule("daily", period_start=period + timedelta(days=1)) is None
    stored = service.get_schedule(pb.GetScheduleRequest(schedule_id="daily")).schedule
    assert stored.skipped_count == 1 and stored.last_job_id == job.id
    service.complete(job.id, CardAnalysisResult(summary="s"))
    later = service.fire_schedule("daily", period_start=period + timedelta(days=2))
    assert later is not None and later.request_id == "schedule:daily:2026-03-31T01:00:00Z"


def test_interval_periods_start_a_whole_interval_after_the_created_second() -> None:
    service = FakeJobService()
    every = Duration()
    every.FromSeconds(1)
    made = _create(service, _schedule("tick", interval=every))
    anchor = made.create_time.seconds  # cut to the second, as JobService's anchor
    assert made.next_fire_time.ToNanoseconds() == (anchor + 1) * 10**9
    time.sleep(max(0.0, anchor + 1.05 - time.time()))
    job = service.fire_schedule("tick")  # the latest period started: anchor + 1 s at least
    assert job is not None
    started = datetime.fromisoformat(job.request_id.removeprefix("schedule:tick:"))
    assert started.timestamp() >= anchor + 1 and started.microsecond == 0
    fraction = Duration()
    fraction.FromMilliseconds(1500)
    assert _refused(_schedule("p", interval=fraction)) == ["schedule.interval"]


def test_period_request_ids_are_jobservices_own() -> None:
    # Issue 42: a caller's request_id beginning "schedule:" is refused, as JobService
    # refuses it (a job made in advance under a period's id would stand for it).
    service = FakeJobService()
    _create(service, _schedule("daily", cron="0 3 * * *"))
    period = datetime(2026, 3, 29, 3, 0, tzinfo=UTC)
    early = _schedule().template
    early.request_id = "schedule:daily:2026-03-29T03:00:00Z"
    with pytest.raises(InvalidRequestError) as refused:
        service.enqueue(early)
    assert _fields(refused.value) == ["request_id"]
    answer = service.batch_enqueue(pb.BatchEnqueueRequest(requests=[_schedule().template, early]))
    assert answer.results[0].WhichOneof("outcome") == "response"
    assert answer.results[1].WhichOneof("outcome") == "error"
    assert list(status_error(answer.results[1].error).field_violations) == [
        "requests[1].request_id"
    ]
    # The schedule's own period still uses it.
    service.complete(answer.results[0].response.job.id, CardAnalysisResult(summary="s"))
    job = service.fire_schedule("daily", period_start=period)
    assert job is not None and job.request_id == early.request_id
