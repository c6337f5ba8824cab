"""Per-tenant bounds under --auth token (issue 42, point 6), in-process JobService on
SQLite and PostgreSQL: an operator bounds who may use the most urgent priorities
(--submitter-most-urgent-priority, --urgent-callers); before, every submitter could
mark all its work 1 and go ahead of every other tenant's. And the PENDING jobs one
caller may have are capped (--max-pending-per-caller)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from san_jobs.job_service.auth.roles import Role
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from tests.integration.job_service.conftest import StartService
from tests.integration.job_service.scripted_gateway import Hang
from tests.integration.job_service.test_auth_roles import add_token, bearer
from tests.support.jobs_api import card_request
from tests.support.rich_errors import rich_error, status_error


async def test_the_most_urgent_priority_is_kept_for_whom_the_operator_names(
    start_service: StartService,
) -> None:
    service = await start_service(
        auth="token", submitter_most_urgent_priority=2, urgent_callers="pager, alerts"
    )
    service.gateway.script = lambda _job, _attempt: Hang()
    tokens = {
        name: bearer(await add_token(service, name, role))
        for name, role in (
            ("mallory", Role.SUBMITTER),
            ("pager", Role.SUBMITTER),
            ("ops", Role.OPERATOR),
        )
    }
    stub = service.stub

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Enqueue(card_request("m1", "x", priority=1), metadata=tokens["mallory"])
    error = rich_error(caught.value)
    assert error.code is grpc.StatusCode.INVALID_ARGUMENT
    assert set(error.field_violations) == {"priority"}
    assert "may use 2 (most urgent) to 5" in error.field_violations["priority"]

    answer = await stub.BatchEnqueue(
        pb.BatchEnqueueRequest(
            requests=[card_request("m2", "x", priority=1), card_request("m3", "x", priority=2)]
        ),
        metadata=tokens["mallory"],
    )
    assert set(status_error(answer.results[0].error).field_violations) == {"requests[0].priority"}
    assert answer.results[1].response.job.priority == 2
    # The default (0: 3) is always taken.
    plain = await stub.Enqueue(card_request("m4", "x"), metadata=tokens["mallory"])
    assert plain.job.priority == 3

    # A schedule's template is held to the same rule: its jobs are the caller's too.
    template = card_request("tick", "x", priority=1)
    request = pb.CreateScheduleRequest(
        schedule=pb.Schedule(schedule_id="tick", interval=Duration(seconds=60), template=template)
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.CreateSchedule(request, metadata=tokens["mallory"])
    error = rich_error(caught.value)
    assert error.code is grpc.StatusCode.INVALID_ARGUMENT
    assert set(error.field_violations) == {"schedule.template.priority"}
    assert (await stub.CreateSchedule(request, metadata=tokens["pager"])).schedule.schedule_id

    # A named caller and an operator may use 1.
    for name in ("pager", "ops"):
        urgent = await stub.Enqueue(
            card_request(f"{name}-1", "x", priority=1), metadata=tokens[name]
        )
        assert urgent.job.priority == 1


async def test_without_the_setting_any_submitter_may_use_priority_one(
    start_service: StartService,
) -> None:
    service = await start_service(auth="token")
    service.gateway.script = lambda _job, _attempt: Hang()
    token = bearer(await add_token(service, "alice", Role.SUBMITTER))
    answer = await service.stub.Enqueue(card_request("a", "x", priority=1), metadata=token)
    assert answer.job.priority == 1


def delayed(target_id: str) -> pb.EnqueueRequest:
    """A job delayed 300 days: PENDING all that time (the attack of point 6)."""
    request = card_request(target_id, "x")
    request.schedule_time.FromDatetime(datetime.now(UTC) + timedelta(days=300))
    return request


async def test_pending_jobs_are_capped_per_caller(start_service: StartService) -> None:
    """--max-pending-per-caller: before, a submitter could keep any number of jobs
    PENDING (delayed a year ahead, or waiting for a job that never ends)."""
    service = await start_service(auth="token", max_pending_per_caller=3)
    service.gateway.script = lambda _job, _attempt: Hang()
    alice = bearer(await add_token(service, "alice", Role.SUBMITTER))
    bob = bearer(await add_token(service, "bob", Role.SUBMITTER))
    stub = service.stub
    mine = [(await stub.Enqueue(delayed(f"a{i}"), metadata=alice)).job.id for i in range(3)]

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Enqueue(delayed("a3"), metadata=alice)
    error = rich_error(caught.value)
    assert error.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error.reason == "QUOTA_EXCEEDED"
    assert error.metadata["cap"] == "max-pending-per-caller"
    assert error.metadata["limit"] == "3"

    # Another caller has a count of its own; a batch stores what fits, item by item.
    answer = await stub.BatchEnqueue(
        pb.BatchEnqueueRequest(requests=[delayed(f"b{i}") for i in range(5)]), metadata=bob
    )
    kinds = [r.WhichOneof("outcome") for r in answer.results]
    assert kinds == ["response"] * 3 + ["error"] * 2
    assert status_error(answer.results[3].error).reason == "QUOTA_EXCEEDED"
    assert answer.results[3].error.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]

    # Room again once one of hers is no longer PENDING.
    await stub.CancelJob(pb.CancelJobRequest(job_id=mine[0]), metadata=alice)
    again = await stub.Enqueue(delayed("a3"), metadata=alice)
    assert again.job.status == pb.JOB_STATUS_PENDING
