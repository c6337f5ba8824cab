"""Usage per attempt, and its sums (GetUsage), on every store: each attempt keeps the
gateway's usage when it completes or fails; usage_totals groups the attempts that
ended in a range by job type, model and caller."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from _storage_support import failure, new_job

from san_jobs.job_service.domain.model import AttemptUsage, JobType, OnDuplicate
from san_jobs.job_service.domain.ports import (
    ClaimParams,
    CompleteParams,
    EnqueueParams,
    FailParams,
    JobStore,
    UsageTotalsParams,
)
from san_jobs.job_service.domain.usage import UsageQuery, UsageTotal
from tests.support.clock import FakeClock

GPT = AttemptUsage("gpt-4o-mini", 120, 30, 0.25)
LOCAL = AttemptUsage("san-local-v1", 10, 4, 0.5)


async def run_once(
    store: JobStore,
    target: str,
    usage: AttemptUsage | None,
    *,
    job_type: JobType = JobType.CARD_ANALYSIS,
    caller: str = "alice",
    fails: bool = False,
) -> None:
    """Enqueue a job for `caller` and end its one attempt with `usage`."""
    job, _ = await store.commands.enqueue(
        EnqueueParams(
            job=replace(new_job(target, job_type, max_attempts=1), requested_by=caller),
            on_duplicate=OnDuplicate.REJECT,
        )
    )
    (claim,) = [
        c
        for c in await store.worker.claim(ClaimParams(limit=100, lease_seconds=60))
        if c.job.id == job.id
    ]
    if fails:
        await store.worker.fail(
            FailParams(
                job_id=job.id,
                token=claim.token,
                failure=replace(failure(), usage=usage),
                retry_at=None,
            )
        )
    else:
        await store.worker.complete(
            CompleteParams(job_id=job.id, token=claim.token, result={"summary": "s"}, usage=usage)
        )


async def test_each_attempt_keeps_its_usage_and_a_failed_one_too(
    store: JobStore, clock: FakeClock
) -> None:
    job, _ = await store.commands.enqueue(
        EnqueueParams(job=new_job("t-1", max_attempts=3), on_duplicate=OnDuplicate.REJECT)
    )
    (first,) = await store.worker.claim(ClaimParams(limit=10, lease_seconds=60))
    # A failed attempt that is retried keeps what its call used.
    await store.worker.fail(
        FailParams(
            job_id=job.id,
            token=first.token,
            failure=replace(failure(), usage=LOCAL),
            retry_at=clock(),
        )
    )
    (second,) = await store.worker.claim(ClaimParams(limit=10, lease_seconds=60))
    done = await store.worker.complete(
        CompleteParams(job_id=job.id, token=second.token, result={"summary": "s"}, usage=GPT)
    )
    assert [a.usage for a in done.attempts] == [LOCAL, GPT]
    assert done.result == {"summary": "s"}, "usage never enters the stored result"
    assert [a.usage for a in (await store.queries.get(job.id)).attempts] == [LOCAL, GPT]


async def test_an_attempt_without_usage_stays_without(store: JobStore) -> None:
    job, _ = await store.commands.enqueue(
        EnqueueParams(job=new_job("t-1"), on_duplicate=OnDuplicate.REJECT)
    )
    (claim,) = await store.worker.claim(ClaimParams(limit=10, lease_seconds=60))
    assert claim.job.attempts[-1].usage is None, "an open attempt has none"
    done = await store.worker.complete(
        CompleteParams(job_id=job.id, token=claim.token, result={"summary": "s"})
    )
    assert done.attempts[-1].usage is None


async def test_usage_is_summed_by_type_model_and_caller_over_the_range(
    store: JobStore, clock: FakeClock
) -> None:
    start = clock()
    await run_once(store, "a1", GPT)
    await run_once(store, "a2", GPT)
    await run_once(store, "a3", replace(GPT, cached=True, input_tokens=0, output_tokens=0))
    await run_once(store, "a4", LOCAL, fails=True)
    await run_once(store, "b1", GPT, caller="bob")
    await run_once(store, "e1", LOCAL, job_type=JobType.EMBEDDING)
    await run_once(store, "n1", None)  # no usage reported: not counted
    clock.advance(3600)
    await run_once(store, "late", GPT)  # after the range
    end = start + timedelta(seconds=60)

    totals, truncated = await store.queries.usage_totals(
        UsageTotalsParams(query=UsageQuery(start=start, end=end), max_groups=100)
    )

    assert not truncated
    assert totals == [
        UsageTotal(JobType.CARD_ANALYSIS, "gpt-4o-mini", "alice", 3, 1, 240, 60, 0.75),
        UsageTotal(JobType.CARD_ANALYSIS, "gpt-4o-mini", "bob", 1, 0, 120, 30, 0.25),
        UsageTotal(JobType.CARD_ANALYSIS, "san-local-v1", "alice", 1, 0, 10, 4, 0.5),
        UsageTotal(JobType.EMBEDDING, "san-local-v1", "alice", 1, 0, 10, 4, 0.5),
    ]
    later, _ = await store.queries.usage_totals(
        UsageTotalsParams(query=UsageQuery(start=end, end=clock() + timedelta(1)), max_groups=100)
    )
    assert [(t.requested_by, t.attempts) for t in later] == [("alice", 1)]


async def test_usage_filters_by_type_and_caller_and_is_bounded(
    store: JobStore, clock: FakeClock
) -> None:
    start = clock()
    await run_once(store, "a1", GPT)
    await run_once(store, "b1", GPT, caller="bob")
    await run_once(store, "e1", LOCAL, job_type=JobType.EMBEDDING, caller="bob")
    end = start + timedelta(seconds=60)

    embeddings, _ = await store.queries.usage_totals(
        UsageTotalsParams(
            query=UsageQuery(start=start, end=end, job_types=(JobType.EMBEDDING,)), max_groups=100
        )
    )
    assert [(t.job_type, t.requested_by) for t in embeddings] == [(JobType.EMBEDDING, "bob")]
    bobs, _ = await store.queries.usage_totals(
        UsageTotalsParams(
            query=UsageQuery(start=start, end=end, requested_by="bob"), max_groups=100
        )
    )
    assert [t.job_type for t in bobs] == [JobType.CARD_ANALYSIS, JobType.EMBEDDING]
    first, truncated = await store.queries.usage_totals(
        UsageTotalsParams(query=UsageQuery(start=start, end=end), max_groups=2)
    )
    assert truncated
    assert [(t.model, t.requested_by) for t in first] == [
        ("gpt-4o-mini", "alice"),
        ("gpt-4o-mini", "bob"),
    ]
    empty, truncated = await store.queries.usage_totals(
        UsageTotalsParams(query=UsageQuery(start=end, end=end), max_groups=10)
    )
    assert (empty, truncated) == ([], False)
