"""StreamJobChanges over real gRPC on SQLite and PostgreSQL: every change after a
cursor in order, then live (also from another instance), resumable, and refused
loudly when its cursor's changes are gone."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from tests.integration.job_service.conftest import Service, StartService
from tests.integration.job_service.scripted_gateway import Fail
from tests.support.jobs_api import card_request, wait_terminal
from tests.support.rich_errors import rich_error


async def read_changes(
    stub: pb_grpc.JobServiceStub, count: int, after_cursor: str = "", **filters: object
) -> list[pb.StreamJobChangesResponse]:
    """The first `count` changes (progress marks left out) after `after_cursor`."""
    call = stub.StreamJobChanges(
        pb.StreamJobChangesRequest(after_cursor=after_cursor, **filters),  # type: ignore[arg-type]
        timeout=20,
    )
    got: list[pb.StreamJobChangesResponse] = []
    try:
        async for change in call:
            if change.HasField("job"):
                got.append(change)
            if len(got) == count:
                return got
    finally:
        call.cancel()
    raise AssertionError(f"the stream ended after {len(got)} changes")


async def finish(service: Service, target: str) -> pb.Job:
    job = (await service.stub.Enqueue(card_request(target, "A text to summarise."))).job
    return (await wait_terminal(service.stub, [job.id], 20))[job.id]


async def test_every_change_in_order_then_resumed_then_live(start_service: StartService) -> None:
    service = await start_service(max_attempts=1)
    done = await finish(service, "feed-done")
    service.gateway.script = lambda _j, _a: Fail(grpc.StatusCode.INVALID_ARGUMENT, "bad input")
    failed = await finish(service, "feed-failed")
    retried = await service.stub.RetryFailed(pb.RetryFailedRequest(job_ids=[failed.id]))
    assert list(retried.job_ids) == [failed.id]
    await wait_terminal(service.stub, [failed.id], 20)  # fails again: a fourth change
    service.gateway.script = lambda _j, _a: None

    changes = await read_changes(service.stub, 4)
    assert [(c.job.id, c.job.status) for c in changes] == [
        (done.id, pb.JOB_STATUS_COMPLETED),
        (failed.id, pb.JOB_STATUS_FAILED),
        (failed.id, pb.JOB_STATUS_PENDING),
        (failed.id, pb.JOB_STATUS_FAILED),
    ]
    first = changes[0].job
    assert first.card_analysis_result.summary == done.card_analysis_result.summary
    assert first.WhichOneof("input") is None  # the feed carries results, not inputs
    assert len({c.cursor for c in changes}) == 4

    # Resumed after the second: the rest, then a change made while it was away.
    later = asyncio.ensure_future(read_changes(service.stub, 3, changes[1].cursor))
    newest = await finish(service, "feed-newest")
    resumed = await asyncio.wait_for(later, 20)
    assert [c.job.id for c in resumed] == [failed.id, failed.id, newest.id]
    assert [c.cursor for c in resumed[:2]] == [c.cursor for c in changes[2:]]

    only_completed = await read_changes(service.stub, 2, statuses=[pb.JOB_STATUS_COMPLETED])
    assert [c.job.id for c in only_completed] == [done.id, newest.id]


async def test_bad_and_lost_cursors_are_refused_by_name(start_service: StartService) -> None:
    service = await start_service(retain_changes="1s")
    await finish(service, "feed-old")
    (change,) = await read_changes(service.stub, 1)
    feed_id, _, pos = change.cursor.partition(".")

    async def refusal(after_cursor: str) -> grpc.aio.AioRpcError:
        call = service.stub.StreamJobChanges(
            pb.StreamJobChangesRequest(after_cursor=after_cursor), timeout=10
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call.read()
        return caught.value

    for malformed in (
        "nonsense",
        f"{feed_id}.-1",
        f"{feed_id}.1x",
        "x" * 129,
        f"{feed_id}.{2**64}",
    ):
        error = await refusal(malformed)
        assert error.code() is grpc.StatusCode.INVALID_ARGUMENT, malformed
        assert "after_cursor" in rich_error(error).field_violations
    other_feed = await refusal(f"{'0' * len(feed_id)}.{pos}")
    assert other_feed.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert rich_error(other_feed).reason == "CURSOR_EXPIRED"
    ahead = await refusal(f"{feed_id}.{int(pos) + 1000}")
    assert rich_error(ahead).reason == "CURSOR_EXPIRED"

    # Past retention: the change is deleted, its predecessor's cursor has lost it.
    await asyncio.sleep(1.2)
    await finish(service, "feed-young")
    assert await service.runtime.change_feed.prune() == 1
    expired = await refusal(f"{feed_id}.0")
    detail = rich_error(expired)
    assert expired.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert (detail.domain, detail.reason) == ("jobs.san", "CURSOR_EXPIRED")
    assert detail.metadata["oldestCursor"] == change.cursor
    # From that oldest cursor (or from the start) the young change is all there is.
    (young,) = await read_changes(service.stub, 1, detail.metadata["oldestCursor"])
    assert young.job.target_id == "feed-young"
    (from_start,) = await read_changes(service.stub, 1)
    assert from_start.cursor == young.cursor


@pytest.mark.postgres
async def test_a_stream_on_one_instance_follows_changes_made_on_another(
    start_service: StartService,
) -> None:
    reader = await start_service(workers=1)
    writer = await start_service(workers=4)
    await reader.runtime.worker.stop(0.1)  # every job runs on the writer
    stream = asyncio.ensure_future(read_changes(reader.stub, 20))
    enqueued = [
        (await writer.stub.Enqueue(card_request(f"feed-x-{i}", "Text."))).job.id for i in range(20)
    ]
    changes = await asyncio.wait_for(stream, 30)
    assert sorted(c.job.id for c in changes) == sorted(enqueued)
    assert all(c.job.status == pb.JOB_STATUS_COMPLETED for c in changes)
