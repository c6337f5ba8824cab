"""A dispatch pause opened through the store shows, within about a second, in
GetJobStats.paused, in a waiting job's waiting_for (GetJob, ListJobs) and on an open
StreamJobUpdates of that job; and stops showing once closed. SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import grpc

from san_jobs.job_service.domain.dispatch import PauseReason
from san_jobs.job_service.domain.model import JobType
from san_jobs.job_service.domain.ports import OpenPauseParams
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from tests.integration.job_service.conftest import Service, StartService
from tests.integration.job_service.scripted_gateway import Fail
from tests.support.jobs_api import card_request

# The pause cache is at most ~1 s old; a stream hears of a change within ~2 s.
SHOWN_WITHIN = 1.5
STREAM_SHOWS_WITHIN = 3.0


async def _until(check: Callable[[], Awaitable[bool]], what: str, within: float) -> float:
    """Seconds until `check()` holds; fails naming `what` past `within`."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while not await check():
        if loop.time() - start > within:
            raise AssertionError(f"not within {within:g}s: {what}")
        await asyncio.sleep(0.02)
    return loop.time() - start


async def _waiting_job(service: Service) -> str:
    """A PENDING job that stays PENDING: its first attempt failed and its retry is a
    minute away."""
    service.gateway.script = lambda _j, attempt: (
        Fail(grpc.StatusCode.UNAVAILABLE, "connection refused") if attempt == 1 else None
    )
    job = (await service.stub.Enqueue(card_request("scrap-wait", "Some text."))).job

    async def retry_scheduled() -> bool:
        got = (await service.stub.GetJob(pb.GetJobRequest(job_id=job.id))).job
        return got.status == pb.JOB_STATUS_PENDING and got.attempt_count == 1

    await _until(retry_scheduled, "the first attempt failed and a retry waits", 20)
    return job.id


async def test_a_pause_shows_in_stats_get_list_and_stream_then_goes(
    start_service: StartService,
) -> None:
    service = await start_service(retry_base_delay=60, retry_max_delay=60)
    job_id = await _waiting_job(service)
    store = service.runtime.store
    stream = service.stub.StreamJobUpdates(pb.StreamJobUpdatesRequest(job_ids=[job_id]))
    first = await asyncio.wait_for(stream.read(), 10)
    assert not first.job.HasField("waiting_for")

    until = datetime.now(UTC) + timedelta(seconds=5)
    opened = await store.pauses.open_pause(
        OpenPauseParams(
            job_type=JobType.CARD_ANALYSIS,
            reason=PauseReason.CIRCUIT_OPEN,
            until=until,
            last_error="AI gateway unavailable: connection refused",
            instance_id="other-instance",
        )
    )

    async def stats_show_it() -> bool:
        stats = await service.stub.GetJobStats(pb.GetJobStatsRequest())
        return [p.job_type for p in stats.paused] == [pb.JOB_TYPE_CARD_ANALYSIS]

    async def get_shows_it() -> bool:
        job = (await service.stub.GetJob(pb.GetJobRequest(job_id=job_id))).job
        return job.HasField("waiting_for")

    assert await _until(stats_show_it, "GetJobStats lists the pause", SHOWN_WITHIN) < SHOWN_WITHIN
    await _until(get_shows_it, "GetJob shows the job waiting", SHOWN_WITHIN)
    stats = await service.stub.GetJobStats(pb.GetJobStatsRequest())
    paused = stats.paused[0]
    assert paused.reason == pb.PAUSE_REASON_CIRCUIT_OPEN
    assert paused.since.ToDatetime(tzinfo=UTC) == opened.since
    assert paused.until.ToDatetime(tzinfo=UTC) == opened.until
    assert paused.last_error == "AI gateway unavailable: connection refused"
    job = (await service.stub.GetJob(pb.GetJobRequest(job_id=job_id))).job
    assert job.status == pb.JOB_STATUS_PENDING
    assert job.waiting_for == paused
    listed = await service.stub.ListJobs(pb.ListJobsRequest())
    assert [j.waiting_for.reason for j in listed.jobs] == [pb.PAUSE_REASON_CIRCUIT_OPEN]
    shown = await asyncio.wait_for(stream.read(), STREAM_SHOWS_WITHIN)
    assert shown.job.status == pb.JOB_STATUS_PENDING
    assert shown.job.waiting_for == paused

    assert await store.pauses.close_pause(JobType.CARD_ANALYSIS)

    async def stats_clear() -> bool:
        return not (await service.stub.GetJobStats(pb.GetJobStatsRequest())).paused

    async def get_clear() -> bool:
        job = (await service.stub.GetJob(pb.GetJobRequest(job_id=job_id))).job
        return not job.HasField("waiting_for")

    await _until(stats_clear, "GetJobStats no longer lists the pause", SHOWN_WITHIN)
    await _until(get_clear, "GetJob no longer shows the job waiting", SHOWN_WITHIN)
    cleared = await asyncio.wait_for(stream.read(), STREAM_SHOWS_WITHIN)
    assert cleared.job.status == pb.JOB_STATUS_PENDING
    assert not cleared.job.HasField("waiting_for")
    stream.cancel()
