"""Chains of dependencies are bounded and always end (issue 42, point 1), over real
gRPC on SQLite and PostgreSQL:

- an Enqueue that would make a chain deeper than MAX_DEPENDENCY_DEPTH is refused
  INVALID_ARGUMENT naming depends_on[i]; a chain at the bound ends whole when its root
  fails, in one statement;
- a chain stored deeper than the dependents' trigger can recurse (1,100 jobs: SQLite
  stops at 1,000 levels, PostgreSQL's stack between 600 and 800), as before the bound:
  its root's failure could not be written, and the job was given back and claimed
  again every few seconds without end. Now it ends FAILED at its first attempt, saying
  so, and every job of the chain is CANCELLED naming the one it waited for."""

from __future__ import annotations

import grpc
import pytest

from san_jobs.job_service.domain import dependencies
from san_jobs.job_service.domain.dependencies import MAX_DEPENDENCY_DEPTH
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from tests.integration.job_service.conftest import Service, StartService
from tests.integration.job_service.scripted_gateway import Fail
from tests.integration.job_service.test_dependencies import Holds, get
from tests.support.jobs_api import card_request, wait_terminal
from tests.support.rich_errors import rich_error


async def chain(service: Service, root: str, length: int, prefix: str) -> list[str]:
    """`length` cards, each depending on the one before, the first on `root`."""
    ids, previous = [], root
    for index in range(length):
        request = card_request(f"{prefix}{index}", "Chained. Text.", depends_on=[previous])
        previous = (await service.stub.Enqueue(request)).job.id
        ids.append(previous)
    return ids


async def test_a_chain_deeper_than_the_bound_is_refused_naming_depends_on(
    start_service: StartService,
) -> None:
    service = await start_service(max_attempts=1)
    held = Holds(service)
    root = (await service.stub.Enqueue(card_request("root", "Root. Text."))).job.id
    await held[root].reached.wait()
    linked = await chain(service, root, MAX_DEPENDENCY_DEPTH, "link")

    side = (await service.stub.Enqueue(card_request("side", "Side. Text."))).job.id
    too_deep = card_request("deep", "Deep. Text.", depends_on=[side, linked[-1]])
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await service.stub.Enqueue(too_deep)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    violations = rich_error(caught.value).field_violations
    assert set(violations) == {"depends_on[1]"}
    assert f"at most {MAX_DEPENDENCY_DEPTH} deep" in violations["depends_on[1]"]
    # A batch names the item; nothing of it is stored.
    answer = await service.stub.BatchEnqueue(pb.BatchEnqueueRequest(requests=[too_deep]))
    assert answer.results[0].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    listed = (await service.stub.ListJobs(pb.ListJobsRequest(page_size=100))).jobs
    assert len(listed) == MAX_DEPENDENCY_DEPTH + 2  # the root, the chain, the side job

    # A chain at the bound ends whole when its root fails.
    held[root].fail = Fail(grpc.StatusCode.INVALID_ARGUMENT, "the provider refused the text")
    held.release(root)
    ended = await wait_terminal(service.stub, [root, *linked], timeout=20)
    assert ended[root].status == pb.JOB_STATUS_FAILED
    assert ended[root].error_message.endswith("the provider refused the text")
    previous = root
    for job_id in linked:
        assert ended[job_id].status == pb.JOB_STATUS_CANCELLED
        assert ended[job_id].error_message.startswith(f"Dependency {previous} ")
        previous = job_id
    held.release(side)


async def test_a_chain_the_trigger_cannot_end_still_ends_at_its_first_attempt(
    start_service: StartService, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """12 s on SQLite, 25 s on PostgreSQL: 1,100 jobs enqueued one by one, as a caller
    made them before the bound (the chain must pass the trigger's recursion limit),
    then the failed write of the root's outcome, which takes seconds by itself."""
    monkeypatch.setattr(dependencies, "MAX_DEPENDENCY_DEPTH", 10_000)
    service = await start_service(max_attempts=3)
    held = Holds(service)
    root = (await service.stub.Enqueue(card_request("root", "Root. Text."))).job.id
    await held[root].reached.wait()
    linked = await chain(service, root, 1_100, "link")
    bystander = (await service.stub.Enqueue(card_request("other", "Other. Text."))).job.id

    held[root].fail = Fail(grpc.StatusCode.INVALID_ARGUMENT, "the provider refused the text")
    held.release(root, bystander)
    ended = await wait_terminal(service.stub, [root, bystander], timeout=120)
    failed = ended[root]
    assert failed.status == pb.JOB_STATUS_FAILED
    assert failed.error_code == "INTERNAL"
    assert failed.error_message.startswith(
        "Internal error: the outcome could not be recorded (error id "
    ), failed.error_message
    error_id = failed.error_message.rsplit(" ", 1)[-1].rstrip(")")
    # The outcome it could not record is in the log line that names the error id.
    logged = [r.getMessage() for r in caplog.records if error_id in r.getMessage()]
    assert any("FAILED: INVALID_ARGUMENT: the provider refused the text" in m for m in logged)
    assert len(failed.attempts) == 1  # not given back and claimed again
    assert service.gateway.calls[root] == 1
    assert ended[bystander].status == pb.JOB_STATUS_COMPLETED

    previous = root
    for job_id in (linked[0], linked[1], linked[550], linked[-1]):
        job = await get(service, job_id)
        assert job.status == pb.JOB_STATUS_CANCELLED, job_id
        position = linked.index(job_id)
        expected = root if position == 0 else linked[position - 1]
        word = "FAILED" if position == 0 else "CANCELLED"
        assert job.error_message == f"Dependency {expected} {word}"
        assert job.error_reason == "DEPENDENCY_ENDED"
        previous = job_id
    assert previous == linked[-1]
    counts = (await service.stub.GetJobStats(pb.GetJobStatsRequest())).counts
    active = (pb.JOB_STATUS_PENDING, pb.JOB_STATUS_PROCESSING)
    assert not [c for c in counts if c.status in active], counts
