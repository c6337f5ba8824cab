"""Schedules under --auth token (issue 42, point 6), on a real JobService on SQLite
and PostgreSQL:

- a caller has at most --max-schedules-per-caller schedules: one more is refused
  RESOURCE_EXHAUSTED, ErrorInfo QUOTA_EXCEEDED naming the cap (a retry of
  a stored one, and another caller's, are not refused);
- a revoked owner's 1 s schedule stops firing, and GetSchedule/ListSchedules show it
  paused with the reason; a token made again under the name does not start it;
  ResumeSchedule by that new token takes it over and it fires again.

About 5 s per database: it watches real periods of a 1 s schedule (fired, held two
periods after the revocation and one more after the name's new token, fired again)."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from san_jobs.job_service.auth.roles import Role
from san_jobs.job_service.storage.api_tokens import SqlTokenStore
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from tests.integration.job_service.conftest import Service, StartService
from tests.integration.job_service.test_auth_roles import Metadata, add_token, bearer
from tests.support.jobs_api import card_request
from tests.support.rich_errors import rich_error


def schedule(schedule_id: str, target: str) -> pb.Schedule:
    return pb.Schedule(
        schedule_id=schedule_id,
        interval=Duration(seconds=1),
        template=card_request(target, "text"),
    )


def create(schedule_id: str, target: str = "t") -> pb.CreateScheduleRequest:
    return pb.CreateScheduleRequest(schedule=schedule(schedule_id, target))


async def test_a_callers_schedules_are_capped(start_service: StartService) -> None:
    service = await start_service(auth="token", max_schedules_per_caller=2)
    mallory = bearer(await add_token(service, "mallory", Role.SUBMITTER))
    victor = bearer(await add_token(service, "victor", Role.SUBMITTER))
    stub = service.stub
    for n in range(2):
        await stub.CreateSchedule(create(f"m{n}", f"m{n}"), metadata=mallory)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.CreateSchedule(create("m2", "m2"), metadata=mallory)
    error = rich_error(caught.value)
    assert error.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error.reason == "QUOTA_EXCEEDED"
    assert error.metadata == {"cap": "max-schedules-per-caller", "limit": "2"}
    assert error.quota_violations == ["caller:mallory"]
    assert "max-schedules-per-caller" in (caught.value.details() or "")
    # A retry of a stored schedule is not a new one; another caller has its own cap.
    await stub.CreateSchedule(create("m1", "m1"), metadata=mallory)
    await stub.CreateSchedule(create("m2", "v"), metadata=victor)


async def fired(service: Service, schedule_id: str, metadata: Metadata) -> int:
    """The jobs of the schedule's periods (a few: one page)."""
    page = await service.stub.ListJobs(pb.ListJobsRequest(page_size=1000), metadata=metadata)
    prefix = f"schedule:{schedule_id}:"
    return sum(1 for job in page.jobs if job.request_id.startswith(prefix))


async def until_fired(service: Service, schedule_id: str, more_than: int, md: Metadata) -> int:
    for _ in range(40):  # at most 4 s for a 1 s schedule
        count = await fired(service, schedule_id, md)
        if count > more_than:
            return count
        await asyncio.sleep(0.1)
    raise AssertionError(f"{schedule_id} did not fire")


async def test_a_revoked_owners_schedule_stops_and_a_new_token_does_not_inherit_it(
    start_service: StartService,
) -> None:
    service = await start_service(auth="token", workers=1)
    alice = bearer(await add_token(service, "alice", Role.SUBMITTER))
    ops = bearer(await add_token(service, "ops", Role.OPERATOR))
    stub = service.stub
    # Each period's job finishes at once (the scripted gateway answers), so none
    # overlaps the next.
    await stub.CreateSchedule(create("tick"), metadata=alice)
    await until_fired(service, "tick", 0, ops)

    assert await SqlTokenStore(service.runtime.store.engine).revoke("alice")
    await asyncio.sleep(0.3)  # a round begun before the revocation may still end
    before = await fired(service, "tick", ops)
    await asyncio.sleep(2.2)  # two periods
    assert await fired(service, "tick", ops) == before
    shown = (
        await stub.GetSchedule(pb.GetScheduleRequest(schedule_id="tick"), metadata=ops)
    ).schedule
    assert shown.paused and "'alice' was revoked at" in shown.paused_reason
    (listed,) = (await stub.ListSchedules(pb.ListSchedulesRequest(), metadata=ops)).schedules
    assert listed.paused and listed.paused_reason == shown.paused_reason

    # The name is given a new token: the schedule does not fire for it by itself.
    alice = bearer(await add_token(service, "alice", Role.SUBMITTER))
    await asyncio.sleep(1.2)
    assert await fired(service, "tick", ops) == before
    mine = (
        await stub.GetSchedule(pb.GetScheduleRequest(schedule_id="tick"), metadata=alice)
    ).schedule
    assert mine.paused and mine.paused_reason

    # ResumeSchedule by the new token takes it over: it fires again.
    resumed = (
        await stub.ResumeSchedule(pb.ResumeScheduleRequest(schedule_id="tick"), metadata=alice)
    ).schedule
    assert not resumed.paused and not resumed.paused_reason and resumed.skipped_count >= 3
    await until_fired(service, "tick", before, ops)
