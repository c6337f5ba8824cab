"""The stream fan-out: routing, latest-state buffers, no blocking, cleanup."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from san_jobs.job_service.domain.model import Job, JobStatus, JobType
from san_jobs.job_service.updates import UpdateHub

T0 = datetime(2026, 11, 29, tzinfo=UTC)


def job(
    job_id: str,
    status: JobStatus = JobStatus.PENDING,
    seconds: int = 0,
    job_type: JobType = JobType.CARD_ANALYSIS,
) -> Job:
    return Job(
        id=job_id,
        job_type=job_type,
        status=status,
        target_id="t",
        request_params={"text": "x"},
        requested_by="",
        request_id=None,
        result=None,
        error_message=None,
        error_code=None,
        error_reason=None,
        attempt_count=0,
        max_attempts=3,
        created_at=T0,
        updated_at=T0 + timedelta(seconds=seconds),
        started_at=None,
        completed_at=None,
        failed_at=None,
        cancelled_at=None,
        cancel_reason=None,
        next_attempt_at=None,
        lease_expires_at=None,
        claim_token=None,
    )


async def test_named_subscription_gets_only_its_jobs() -> None:
    hub = UpdateHub()
    sub = hub.subscribe(job_ids=["a"])
    hub.publish([job("b"), job("a", JobStatus.PROCESSING)])
    got = await asyncio.wait_for(sub.get(), 1)
    assert [(j.id, j.status) for j in got] == [("a", JobStatus.PROCESSING)]


async def test_slow_subscriber_keeps_latest_state_only_and_never_blocks() -> None:
    hub = UpdateHub()
    sub = hub.subscribe(job_ids=["a"])
    for second, status in enumerate(
        [JobStatus.PROCESSING, JobStatus.PENDING, JobStatus.PROCESSING, JobStatus.COMPLETED]
    ):
        hub.publish([job("a", status, second)])  # returns at once: nobody reads yet
    got = await sub.get()
    assert [(j.id, j.status) for j in got] == [("a", JobStatus.COMPLETED)]


async def test_older_state_never_replaces_newer() -> None:
    hub = UpdateHub()
    sub = hub.subscribe(job_ids=["a"])
    hub.publish([job("a", JobStatus.COMPLETED, 5)])
    hub.publish([job("a", JobStatus.PROCESSING, 1)])
    assert [j.status for j in await sub.get()] == [JobStatus.COMPLETED]


async def test_feed_filters_by_type_and_status() -> None:
    hub = UpdateHub()
    feed = hub.subscribe(job_types=[JobType.TIL_GENERATION], statuses=[JobStatus.FAILED])
    hub.publish(
        [
            job("a", JobStatus.FAILED),
            job("b", JobStatus.FAILED, job_type=JobType.TIL_GENERATION),
            job("c", JobStatus.COMPLETED, job_type=JobType.TIL_GENERATION),
        ]
    )
    assert [j.id for j in await feed.get()] == ["b"]


async def test_close_unsubscribes_and_wakes_reader() -> None:
    hub = UpdateHub()
    sub = hub.subscribe(job_ids=["a", "b"])
    feed = hub.subscribe()
    assert hub.subscription_count == 2
    reader = asyncio.create_task(sub.get())
    await asyncio.sleep(0)
    sub.close()
    assert await asyncio.wait_for(reader, 1) == []
    feed.close()
    assert hub.subscription_count == 0
    assert hub.watched_ids(["a", "b"]) == []


async def test_watched_ids() -> None:
    hub = UpdateHub()
    hub.subscribe(job_ids=["a"])
    assert hub.watched_ids(["a", "b"]) == ["a"]
    hub.subscribe()
    assert hub.watched_ids(["a", "b"]) == ["a", "b"]


async def test_order_of_changes_is_kept_per_job() -> None:
    hub = UpdateHub()
    sub = hub.subscribe(job_ids=["a", "b"])
    first = job("a", JobStatus.PROCESSING, 1)
    hub.publish([first])
    assert await sub.get() == [first]
    second = replace(
        first, status=JobStatus.COMPLETED, updated_at=first.updated_at + timedelta(seconds=1)
    )
    hub.publish([second])
    assert await sub.get() == [second]
