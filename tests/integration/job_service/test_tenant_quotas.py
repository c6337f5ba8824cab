"""Per-tenant bounds under --auth token (issue 42, point 6), in-process JobService on
SQLite and PostgreSQL: an operator bounds who may use the most urgent priorities
(--submitter-most-urgent-priority, --urgent-callers); before, every submitter could
mark all its work 1 and go ahead of every other tenant's."""

from __future__ import annotations

import grpc
import pytest

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
