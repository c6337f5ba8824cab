"""Failure groups (ListFailureGroups) on every store: the FAILED jobs of a time range
counted by error_code, error_reason and the first 80 characters of error_message,
largest group first, at most N groups, with an example job of each."""

from __future__ import annotations

from datetime import timedelta

from _storage_support import enqueue, new_job

from san_jobs.job_service.domain.failure_groups import (
    MESSAGE_PREFIX_CHARS,
    FailureQuery,
)
from san_jobs.job_service.domain.model import Failure, Job, JobFilter, JobType, OnDuplicate
from san_jobs.job_service.domain.ports import (
    ClaimParams,
    EnqueueParams,
    FailParams,
    FailureGroupsParams,
    JobStore,
    RetryFailedParams,
)
from tests.support.clock import FakeClock

TIMEOUT = "Timeout: the call took too long"
DOWN = "AI gateway unavailable: connection refused"


async def fail_one(
    store: JobStore,
    target: str,
    message: str,
    *,
    code: str = "DEADLINE_EXCEEDED",
    reason: str = "",
    job_type: JobType = JobType.CARD_ANALYSIS,
) -> Job:
    """Enqueue, claim and fail for good one job with this error."""
    job, _ = await store.commands.enqueue(
        EnqueueParams(
            job=new_job(target, job_type, max_attempts=1), on_duplicate=OnDuplicate.REJECT
        )
    )
    (claim,) = [
        c
        for c in await store.worker.claim(ClaimParams(limit=100, lease_seconds=60))
        if c.job.id == job.id
    ]
    return await store.worker.fail(
        FailParams(
            job_id=job.id,
            token=claim.token,
            failure=Failure(code, reason, message, False),
            retry_at=None,
        )
    )


def day_before(clock: FakeClock) -> FailureQuery:
    now = clock()
    return FailureQuery(
        failed_after=now - timedelta(days=1), failed_before=now + timedelta(seconds=1)
    )


async def test_failures_are_grouped_by_code_reason_and_message_prefix(
    store: JobStore, clock: FakeClock
) -> None:
    # Messages that differ only after the first 80 characters share a group.
    long_head = "JSON Parse Error at line 4: " + "x" * MESSAGE_PREFIX_CHARS
    timeouts = [await fail_one(store, f"t{i}", TIMEOUT) for i in range(3)]
    await fail_one(store, "d1", DOWN, code="UNAVAILABLE")
    clock.advance(5)
    last_down = await fail_one(store, "d2", DOWN, code="UNAVAILABLE")
    await fail_one(store, "p1", long_head + " first", code="INTERNAL", reason="MALFORMED_RESPONSE")
    await fail_one(store, "p2", long_head + " second", code="INTERNAL", reason="MALFORMED_RESPONSE")
    # Same message, another reason: another group.
    await fail_one(store, "r1", TIMEOUT, code="DEADLINE_EXCEEDED", reason="SLOW")
    # Not FAILED: not counted.
    await enqueue(store, "pending")

    groups, truncated = await store.queries.failure_groups(
        FailureGroupsParams(query=day_before(clock), max_groups=100)
    )

    assert not truncated
    keyed = [(g.error_code, g.error_reason, g.message_prefix, g.count) for g in groups]
    assert keyed == [
        ("DEADLINE_EXCEEDED", "", TIMEOUT, 3),
        # Two groups of 2: the most recent failure first.
        ("INTERNAL", "MALFORMED_RESPONSE", long_head[:MESSAGE_PREFIX_CHARS], 2),
        ("UNAVAILABLE", "", DOWN, 2),
        ("DEADLINE_EXCEEDED", "SLOW", TIMEOUT, 1),
    ]
    assert groups[0].example_job_id in {job.id for job in timeouts}
    assert groups[2].latest_failed_at == last_down.failed_at
    for group in groups:
        example = await store.queries.get(group.example_job_id)
        assert example.error_code == group.error_code
        assert (example.error_message or "").startswith(group.message_prefix)


async def test_only_the_range_and_the_types_asked_for_are_counted(
    store: JobStore, clock: FakeClock
) -> None:
    await fail_one(store, "early", TIMEOUT)
    clock.advance(3600)
    start = clock()
    await fail_one(store, "card", TIMEOUT)
    await fail_one(store, "til", TIMEOUT, job_type=JobType.TIL_GENERATION)
    clock.advance(3600)
    await fail_one(store, "late", TIMEOUT)
    end = start + timedelta(seconds=60)

    (group,), _ = await store.queries.failure_groups(
        FailureGroupsParams(query=FailureQuery(start, end), max_groups=100)
    )
    assert group.count == 2
    (card,), _ = await store.queries.failure_groups(
        FailureGroupsParams(
            query=FailureQuery(start, end, job_types=(JobType.CARD_ANALYSIS,)), max_groups=100
        )
    )
    assert card.count == 1
    assert (await store.queries.get(card.example_job_id)).target_id == "card"
    nothing, truncated = await store.queries.failure_groups(
        FailureGroupsParams(
            query=FailureQuery(start, end, job_types=(JobType.EMBEDDING,)), max_groups=100
        )
    )
    assert (nothing, truncated) == ([], False)


async def test_at_most_max_groups_largest_first_and_truncated_says_so(
    store: JobStore, clock: FakeClock
) -> None:
    for i in range(3):
        await fail_one(store, f"big{i}", "Big failure")
    for i in range(2):
        await fail_one(store, f"mid{i}", "Middle failure")
    await fail_one(store, "small", "Small failure")

    groups, truncated = await store.queries.failure_groups(
        FailureGroupsParams(query=day_before(clock), max_groups=2)
    )
    assert [(g.message_prefix, g.count) for g in groups] == [
        ("Big failure", 3),
        ("Middle failure", 2),
    ]
    assert truncated
    groups, truncated = await store.queries.failure_groups(
        FailureGroupsParams(query=day_before(clock), max_groups=3)
    )
    assert len(groups) == 3
    assert not truncated


async def test_a_retried_job_leaves_its_group(store: JobStore, clock: FakeClock) -> None:
    job = await fail_one(store, "t1", TIMEOUT)
    await fail_one(store, "t2", TIMEOUT)
    await store.commands.retry_failed(
        RetryFailedParams(
            job_filter=JobFilter(job_ids=(job.id,)), limit=10, dry_run=False, extra_attempts=1
        )
    )
    (group,), _ = await store.queries.failure_groups(
        FailureGroupsParams(query=day_before(clock), max_groups=100)
    )
    assert group.count == 1
