"""Priorities over real gRPC, on SQLite and PostgreSQL: Job.priority round-trips
(Enqueue, GetJob, ListJobs, BatchEnqueue, the change feed), a priority outside 0..5
is INVALID_ARGUMENT naming it, and a priority-1 job enqueued behind a backlog of
priority-5 jobs is claimed before the rest of the backlog, through the worker's
claim-ahead (a slow-ish gateway keeps the pool full)."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from tests.integration.job_service.conftest import Service, StartService
from tests.integration.job_service.scripted_gateway import Slow
from tests.support.jobs_api import card_request, wait_terminal
from tests.support.rich_errors import rich_error, status_error


async def test_priority_round_trips(service: Service) -> None:
    stub = service.stub
    urgent = (await stub.Enqueue(card_request("urgent", "Now.", priority=1))).job
    plain = (await stub.Enqueue(card_request("plain", "Whenever."))).job
    assert (urgent.priority, plain.priority) == (1, 3)  # 0: the default, 3
    assert (await stub.GetJob(pb.GetJobRequest(job_id=urgent.id))).job.priority == 1
    listed = (await stub.ListJobs(pb.ListJobsRequest())).jobs
    assert {j.id: j.priority for j in listed} == {urgent.id: 1, plain.id: 3}
    batch = await stub.BatchEnqueue(
        pb.BatchEnqueueRequest(
            requests=[card_request("b-0", "x", priority=5), card_request("b-1", "x", priority=6)]
        )
    )
    assert batch.results[0].response.job.priority == 5
    assert set(status_error(batch.results[1].error).field_violations) == {"requests[1].priority"}
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Enqueue(card_request("bad", "x", priority=-1))
    error = rich_error(caught.value)
    assert error.code is grpc.StatusCode.INVALID_ARGUMENT
    assert set(error.field_violations) == {"priority"}
    # The change feed's snapshot carries it (job_changes.priority).
    done = (await wait_terminal(stub, [urgent.id], timeout=20))[urgent.id]
    assert done.status == pb.JOB_STATUS_COMPLETED and done.priority == 1
    call = stub.StreamJobChanges(pb.StreamJobChangesRequest(), timeout=10)
    try:
        async for change in call:
            if change.HasField("job") and change.job.id == urgent.id:
                assert change.job.priority == 1
                break
    finally:
        call.cancel()


BACKLOG = 200
WORKERS = 4  # and as many claimed ahead (server.py): 8 jobs held at most
CALL_SECONDS = 0.02


async def test_an_urgent_job_passes_a_low_priority_backlog(start_service: StartService) -> None:
    """200 priority-5 jobs drain through 4 call slots (and 4 claimed ahead) at ~20 ms
    a call: a priority-1 job enqueued once the drain is under way reaches the gateway
    after at most a few more backlog calls (those already claimed, one share turn),
    not after the ~190 backlog jobs before it in age. Under a second: it ends once
    the urgent job is done."""
    service = await start_service(workers=WORKERS)
    order: list[str] = []

    def script(job_id: str, attempt: int) -> Slow:
        order.append(job_id)
        return Slow(CALL_SECONDS)

    service.gateway.script = script
    backlog = await service.stub.BatchEnqueue(
        pb.BatchEnqueueRequest(
            requests=[card_request(f"bulk-{i}", "x", priority=5) for i in range(BACKLOG)]
        )
    )
    backlog_ids = {r.response.job.id for r in backlog.results}
    deadline = time.monotonic() + 10
    while len(order) < 10:
        assert time.monotonic() < deadline, "the backlog never started"
        await asyncio.sleep(0.005)
    urgent = (await service.stub.Enqueue(card_request("urgent", "Now.", priority=1))).job
    seen_before = len(order)
    done = (await wait_terminal(service.stub, [urgent.id], timeout=20))[urgent.id]
    assert done.status == pb.JOB_STATUS_COMPLETED
    position = order.index(urgent.id)
    # Jobs already claimed when it came (8 at most), plus one slot for the share.
    assert position - seen_before <= 2 * WORKERS + 2, (position, seen_before)
    assert len([j for j in order[:position] if j in backlog_ids]) < BACKLOG // 2
