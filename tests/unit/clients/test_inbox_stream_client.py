"""The clients' stream_job_changes on the wire (an in-process grpc.aio JobService
serving a list): cursors, jobs as views, progress marks, CURSOR_EXPIRED and a refused
cursor as typed errors; the blocking client the same."""

from __future__ import annotations

import asyncio

import pytest
from test_inbox_support import cursor_of, serving

from san_jobs.client import (
    CursorExpiredError,
    InvalidRequestError,
    JobsClient,
    JobStatus,
    StreamJobChangesResponse,
)
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb


async def test_changes_after_a_cursor_then_live_with_marks() -> None:
    async with serving() as (feed, client):
        first, second = feed.add_jobs(2)
        feed.add(None)
        seen: list[StreamJobChangesResponse] = []
        changes = client.stream_job_changes(cursor_of(1), statuses=[pb.JOB_STATUS_COMPLETED])
        seen.append(await anext(changes))
        seen.append(await anext(changes))
        (live,) = feed.add_jobs(1)
        seen.append(await asyncio.wait_for(anext(changes), 5))
        await changes.aclose()
    assert [each.cursor for each in seen] == [cursor_of(2), cursor_of(3), cursor_of(4)]
    assert seen[0].job.id == second and seen[0].job.status is JobStatus.JOB_STATUS_COMPLETED
    assert not seen[1].HasField("job")  # a progress mark
    assert seen[2].job.id == live
    (request, *_) = feed.requests
    assert request.after_cursor == cursor_of(1) and list(request.statuses) == [3]
    assert first not in {each.job.id for each in seen}


async def test_an_expired_cursor_names_the_oldest_kept() -> None:
    async with serving() as (feed, client):
        feed.add_jobs(4)
        feed.oldest_kept = 3
        with pytest.raises(CursorExpiredError) as expired:
            async for _ in client.stream_job_changes(cursor_of(1)):
                pass
        assert expired.value.oldest_cursor == cursor_of(3)
        assert expired.value.after_cursor == cursor_of(1)
        with pytest.raises(InvalidRequestError) as refused:
            async for _ in client.stream_job_changes("garbage"):
                pass
        assert [v.field for v in refused.value.field_violations] == ["after_cursor"]


async def test_the_blocking_client_streams_changes_too() -> None:
    async with serving() as (feed, client):
        ids = feed.add_jobs(2)
        address = client.settings.target

        def read_two() -> list[str]:
            with JobsClient(address) as blocking:
                changes = blocking.stream_job_changes("")
                got = [next(changes).job.id, next(changes).job.id]
                changes.close()
                return got

        assert await asyncio.to_thread(read_two) == ids
