"""Keys per tenant (issue 22, point 2), on every store (SQLite, PostgreSQL, memory):
request_id and the active (job_type, target_id) are unique within a tenant only, for
Enqueue, BatchEnqueue (enqueue_many), the group-committed INSERT that carries several
tenants' rows, and RetryFailed's active-slot check. Tenant "" (--auth off) keeps the
one namespace it always had."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from _storage_support import failure, new_job

from san_jobs.job_service.domain.errors import DuplicateJobError
from san_jobs.job_service.domain.model import JobFilter, JobType, NewJob, OnDuplicate
from san_jobs.job_service.domain.ports import (
    CancelParams,
    ClaimParams,
    EnqueueParams,
    FailParams,
    JobStore,
    ReleaseParams,
    RetryFailedParams,
)

REJECT, RETURN = OnDuplicate.REJECT, OnDuplicate.RETURN_EXISTING


def of(tenant: str, target_id: str = "scrap-1", **kwargs: object) -> NewJob:
    """A new job of `tenant` (requested by it, as under --auth token)."""
    base = new_job(target_id, **kwargs)  # type: ignore[arg-type]
    return dataclasses.replace(base, requested_by=tenant, tenant=tenant)


async def test_one_request_id_in_two_tenants_is_two_jobs(store: JobStore) -> None:
    alice, deduplicated = await store.commands.enqueue(
        EnqueueParams(job=of("alice", "a-1", request_id="rid"), on_duplicate=REJECT)
    )
    assert not deduplicated
    bob, deduplicated = await store.commands.enqueue(
        EnqueueParams(job=of("bob", "b-1", request_id="rid"), on_duplicate=REJECT)
    )
    assert not deduplicated and bob.id != alice.id
    assert (bob.requested_by, bob.tenant, bob.target_id) == ("bob", "bob", "b-1")
    # Within a tenant the key still means the same job.
    again, deduplicated = await store.commands.enqueue(
        EnqueueParams(job=of("alice", "other", request_id="rid"), on_duplicate=REJECT)
    )
    assert deduplicated and again.id == alice.id
    again, deduplicated = await store.commands.enqueue(
        EnqueueParams(job=of("bob", "other", request_id="rid"), on_duplicate=RETURN)
    )
    assert deduplicated and again.id == bob.id


async def test_one_active_target_in_two_tenants_is_two_jobs(store: JobStore) -> None:
    alice, _ = await store.commands.enqueue(EnqueueParams(job=of("alice"), on_duplicate=REJECT))
    for on_duplicate in (REJECT, RETURN):
        bob, deduplicated = await store.commands.enqueue(
            EnqueueParams(job=of("bob"), on_duplicate=on_duplicate)
        )
        assert not deduplicated and bob.id != alice.id and bob.tenant == "bob"
        # Bob's own duplicate names bob's job, never alice's.
        with pytest.raises(DuplicateJobError) as refused:
            await store.commands.enqueue(EnqueueParams(job=of("bob"), on_duplicate=REJECT))
        assert refused.value.existing_job_id == bob.id
        same, deduplicated = await store.commands.enqueue(
            EnqueueParams(job=of("bob"), on_duplicate=RETURN)
        )
        assert deduplicated and same.id == bob.id
        await store.commands.cancel(CancelParams(job_id=bob.id, reason="next round"))
    with pytest.raises(DuplicateJobError) as refused:
        await store.commands.enqueue(EnqueueParams(job=of("alice"), on_duplicate=REJECT))
    assert refused.value.existing_job_id == alice.id


async def test_enqueue_many_keys_each_item_within_its_tenant(store: JobStore) -> None:
    alice, _ = await store.commands.enqueue(
        EnqueueParams(job=of("alice", "t-1", request_id="rid-1"), on_duplicate=REJECT)
    )
    outcomes = await store.commands.enqueue_many(
        [
            EnqueueParams(of("bob", "t-1"), REJECT),  # alice's active target: bob's own job
            EnqueueParams(
                of("bob", "t-2", request_id="rid-1"), RETURN
            ),  # alice's key: bob's own job
            EnqueueParams(of("alice", "t-3", request_id="rid-1"), RETURN),  # alice's key: hers
            EnqueueParams(of("bob", "t-1"), REJECT),  # repeats bob's item 0: names bob's job
            EnqueueParams(of("alice", "t-1"), RETURN),  # alice's active target: hers
        ]
    )
    bob_t1, bob_t2, alice_again, bob_repeat, alice_t1 = outcomes
    assert isinstance(bob_t1, tuple) and not bob_t1[1] and bob_t1[0].tenant == "bob"
    assert isinstance(bob_t2, tuple) and not bob_t2[1] and bob_t2[0].tenant == "bob"
    assert isinstance(alice_again, tuple) and alice_again[0].id == alice.id and alice_again[1]
    assert isinstance(bob_repeat, DuplicateJobError) and bob_repeat.existing_job_id == bob_t1[0].id
    assert isinstance(alice_t1, tuple) and alice_t1[0].id == alice.id and alice_t1[1]


async def test_one_group_commit_carries_several_tenants_rows(store: JobStore) -> None:
    # Concurrent enqueues share one INSERT (group commit): rows of two tenants with the
    # same target and request id are all stored, and a repeat within a tenant is not.
    tenants = ["alice", "bob", "carol", "alice"]
    results = await asyncio.gather(
        *(
            store.commands.enqueue(
                EnqueueParams(job=of(t, "shared", request_id="rid"), on_duplicate=REJECT)
            )
            for t in tenants
        )
    )
    by_tenant: dict[str, set[str]] = {}
    for (job, _), tenant in zip(results, tenants, strict=True):
        assert job.tenant == tenant
        by_tenant.setdefault(tenant, set()).add(job.id)
    assert {t: len(ids) for t, ids in by_tenant.items()} == {"alice": 1, "bob": 1, "carol": 1}
    assert sum(1 for _, deduplicated in results if deduplicated) == 1


async def test_the_one_tenant_of_auth_off_keeps_global_keys(store: JobStore) -> None:
    # --auth off: tenant "" whoever requested_by says it is.
    first, _ = await store.commands.enqueue(
        EnqueueParams(job=new_job("t-off", request_id="rid-off"), on_duplicate=REJECT)
    )
    other = dataclasses.replace(new_job("t-elsewhere", request_id="rid-off"), requested_by="x")
    same, deduplicated = await store.commands.enqueue(EnqueueParams(job=other, on_duplicate=REJECT))
    assert deduplicated and same.id == first.id and first.tenant == ""
    with pytest.raises(DuplicateJobError):
        await store.commands.enqueue(
            EnqueueParams(
                job=dataclasses.replace(new_job("t-off"), requested_by="y"), on_duplicate=REJECT
            )
        )


async def _failed(store: JobStore, new: NewJob) -> str:
    job, _ = await store.commands.enqueue(EnqueueParams(job=new, on_duplicate=REJECT))
    claims = await store.worker.claim(ClaimParams(limit=1000, lease_seconds=60))
    for claim in claims:
        if claim.job.id == job.id:
            await store.worker.fail(
                FailParams(job_id=job.id, token=claim.token, failure=failure(), retry_at=None)
            )
        else:
            await store.worker.release(ReleaseParams(job_id=claim.job.id, token=claim.token))
    return job.id


async def test_retry_failed_checks_the_active_slot_within_the_tenant(store: JobStore) -> None:
    alice_failed = await _failed(store, of("alice", "t-r"))
    bob_failed = await _failed(store, of("bob", "t-r"))
    # Bob has an active job of the target again; alice has none.
    bob_active, _ = await store.commands.enqueue(
        EnqueueParams(job=of("bob", "t-r"), on_duplicate=REJECT)
    )
    flt = JobFilter(target_ids=("t-r",), job_types=(JobType.CARD_ANALYSIS,))
    outcome = await store.commands.retry_failed(
        RetryFailedParams(job_filter=flt, limit=100, dry_run=False, extra_attempts=1)
    )
    assert outcome.retried_ids == (alice_failed,)
    assert [job_id for job_id, _ in outcome.skipped] == [bob_failed]
    (reason,) = [reason for _, reason in outcome.skipped]
    assert bob_active.id in reason and alice_failed not in reason
    moved = await store.queries.get(alice_failed)
    assert moved.status.value == "PENDING" and moved.tenant == "alice"
