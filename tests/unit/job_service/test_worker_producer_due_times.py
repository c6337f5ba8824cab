"""The producer's due times in memory are bounded (issue 42, point 13): a delayed job
enqueued here adds a due time only when the next due-time query might not see it
first, and never more than MAX_DUE_TIMES; the far ones are still claimed on time,
found by that query. Virtual time: instant."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from san_jobs.job_service.worker.producer import MAX_DUE_TIMES
from tests.support.virtual_time import on_virtual_time, running_loop
from tests.unit.job_service.test_worker_producer import a_retry_due_in, running


@on_virtual_time
async def test_a_year_of_delayed_jobs_keeps_no_due_time_in_memory() -> None:
    async with running(poll_interval=60.0) as rig:
        now = running_loop().now()
        for day in range(20_000):  # as a tenant's delayed enqueues announce them
            rig.producer.retry_scheduled(now + timedelta(days=1 + day % 365))
        assert rig.producer.due_times_kept == 0
        for i in range(5_000):  # soon, but more than it keeps
            rig.producer.retry_scheduled(now + timedelta(seconds=1 + i / 1_000))
        assert rig.producer.due_times_kept == MAX_DUE_TIMES


@on_virtual_time
async def test_a_job_due_past_the_horizon_is_claimed_on_time_by_the_query() -> None:
    async with running(poll_interval=60.0) as rig:
        await asyncio.sleep(1)  # the first due check is done: nothing due
        due = await a_retry_due_in(rig.store, 150)
        rig.producer.retry_scheduled(due)  # beyond two poll intervals: not kept
        assert rig.producer.due_times_kept == 0
        rig.producer.wake()
        await asyncio.sleep(200)

        ((at, _),) = rig.started
        assert 151 <= at < 151.01
