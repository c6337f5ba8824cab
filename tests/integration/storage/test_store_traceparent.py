"""The traceparent of the Enqueue call is stored with the job and read back by every
read and by the claim (the worker's attempt span is its child), on every store."""

from __future__ import annotations

import asyncio
import dataclasses

from _storage_support import new_job

from san_jobs.job_service.domain.model import OnDuplicate
from san_jobs.job_service.domain.ports import ClaimParams, EnqueueParams, JobStore, ReleaseParams

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def test_traceparent_is_stored_and_read_back_by_get_list_and_claim(store: JobStore) -> None:
    traced = dataclasses.replace(new_job("traced"), traceparent=TRACEPARENT)
    job, _ = await store.commands.enqueue(
        EnqueueParams(job=traced, on_duplicate=OnDuplicate.REJECT)
    )
    assert job.traceparent == TRACEPARENT
    untraced, _ = await store.commands.enqueue(
        EnqueueParams(job=new_job("untraced"), on_duplicate=OnDuplicate.REJECT)
    )
    assert untraced.traceparent is None

    assert (await store.queries.get(job.id)).traceparent == TRACEPARENT
    assert (await store.queries.get(untraced.id)).traceparent is None

    claims = {
        claim.job.id: claim
        for claim in await store.worker.claim(ClaimParams(limit=10, lease_seconds=60))
    }
    assert claims[job.id].job.traceparent == TRACEPARENT
    assert claims[untraced.id].job.traceparent is None

    # A retry keeps it: every attempt of the job belongs to the same trace.
    claim = claims[job.id]
    released = await store.worker.release(ReleaseParams(job_id=job.id, token=claim.token))
    assert released is not None and released.traceparent == TRACEPARENT


async def test_enqueues_batched_together_keep_each_its_own_traceparent(store: JobStore) -> None:
    parents = [f"00-{index:032x}-{index:016x}-01" for index in range(1, 6)]
    jobs = await asyncio.gather(
        *(
            store.commands.enqueue(
                EnqueueParams(
                    job=dataclasses.replace(new_job(f"t{index}"), traceparent=parent),
                    on_duplicate=OnDuplicate.REJECT,
                )
            )
            for index, parent in enumerate(parents)
        )
    )
    for (job, _), parent in zip(jobs, parents, strict=True):
        assert job.traceparent == parent
        assert (await store.queries.get(job.id)).traceparent == parent
