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

import uuid

import grpc
import pytest
from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import create_async_engine

from san_jobs.job_service.domain.dependencies import MAX_DEPENDENCY_DEPTH
from san_jobs.job_service.storage.tables import async_jobs, job_dependencies
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


async def stored_chain(database_url: str, first: str, length: int) -> list[str]:
    """`length` more jobs after `first`, each depending on the one before, written
    straight into the database as copies of `first` (a chain stored before the bound:
    one transaction instead of 1,100 Enqueues)."""
    engine = create_async_engine(database_url)
    try:
        async with engine.begin() as conn:
            row = (await conn.execute(select(async_jobs).where(async_jobs.c.id == first))).one()
            template = dict(row._mapping)
            ids, rows, links, previous = [], [], [], first
            for index in range(length):
                job_id = str(uuid.uuid4())
                rows.append(
                    template
                    | {
                        "id": job_id,
                        "target_id": f"stored{index}",
                        "depends_on": [previous],
                        "has_dependents": index < length - 1,
                    }
                )
                links.append({"job_id": job_id, "depends_on_id": previous, "position": 0})
                ids.append(job_id)
                previous = job_id
            await conn.execute(
                update(async_jobs).where(async_jobs.c.id == first).values(has_dependents=True)
            )
            await conn.execute(insert(async_jobs), rows)
            await conn.execute(insert(job_dependencies), links)
    finally:
        await engine.dispose()
    return ids


async def test_a_chain_the_trigger_cannot_end_still_ends_at_its_first_attempt(
    start_service: StartService, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """About 6 s: the failed writes of the root's outcome through the trigger (past
    SQLite's 1,000 levels of recursion, PostgreSQL's stack) take seconds each. The
    root's call is held while the chain is made (the 600 s deadline: on a loaded
    machine the default 30 s passed, and the held call was retried)."""
    service = await start_service(max_attempts=3, deadline=600.0)
    held = Holds(service)
    root = (await service.stub.Enqueue(card_request("root", "Root. Text."))).job.id
    await held[root].reached.wait()
    linked = await chain(service, root, 1, "link")
    linked += await stored_chain(database_url, linked[0], 1_099)
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


async def test_the_end_of_a_job_loads_only_the_dependents_it_moved(
    start_service: StartService,
) -> None:
    """Issue 42, point 12: on SQLite, the news of a dependency's end loaded every job
    depending on it, with its input (100 roots and 1,000 shared dependents of 10 KB:
    +17 s of CPU). Only those it made due or ended are loaded now."""
    service = await start_service()
    held = Holds(service)
    first, second = [
        (await service.stub.Enqueue(card_request(name, "Root. Text."))).job.id
        for name in ("first", "second")
    ]
    shared = [
        (
            await service.stub.Enqueue(
                card_request(f"shared{i}", "Shared. Text.", depends_on=[first, second])
            )
        ).job.id
        for i in range(20)
    ]
    store = service.runtime.store
    held.release(first)
    await wait_terminal(service.stub, [first], timeout=20)
    assert await store.queries.dependents_moved_by([first]) == []  # all still wait for `second`
    held[second].fail = Fail(grpc.StatusCode.INVALID_ARGUMENT, "refused")
    held.release(second)
    await wait_terminal(service.stub, [second, *shared], timeout=20)
    assert sorted(await store.queries.dependents_moved_by([second])) == sorted(shared)
    assert await store.queries.dependents_moved_by([first]) == []
