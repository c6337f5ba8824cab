"""Group commit: concurrent enqueues, completions and failures share one statement, with
exactly the outcomes they would have had one at a time. The outcomes are every store's
contract (conftest.py); the statement counts are SqlJobStore's (`sql_store`, or checked
only for a SqlJobStore)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from _storage_support import OpenStore, enqueue, failure, new_job
from sqlalchemy import Engine, event

from san_jobs.job_service.domain.errors import (
    DuplicateJobError,
    LeaseLostError,
    StorageDataError,
    StorageFailureError,
)
from san_jobs.job_service.domain.model import Failure, Job, JobStatus, NewJob, OnDuplicate
from san_jobs.job_service.domain.ports import (
    CancelParams,
    ClaimParams,
    CompleteParams,
    EnqueueParams,
    FailParams,
    JobStore,
)
from san_jobs.job_service.storage.direct import DirectStatement, HeldConnection
from san_jobs.job_service.storage.repository import MAX_BATCH, SqlJobStore
from tests.support.clock import FakeClock

REJECT, RETURN = OnDuplicate.REJECT, OnDuplicate.RETURN_EXISTING


@contextmanager
def batch_statements() -> Iterator[list[str]]:
    """The SQL of every multi-row statement (the JSON row batches) run meanwhile,
    through SQLAlchemy or directly on asyncpg (the hot statements on PostgreSQL)."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "json_each" in statement or "jsonb_to_recordset" in statement:
            seen.append(statement)

    direct_fetch = HeldConnection.fetch

    async def fetch(held: HeldConnection, statement: DirectStatement, params: Any) -> Any:
        record(None, None, statement.sql)
        return await direct_fetch(held, statement, params)

    # On every engine (the store may keep a separate pool for autocommit statements).
    event.listen(Engine, "before_cursor_execute", record)
    HeldConnection.fetch = fetch  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        HeldConnection.fetch = direct_fetch  # type: ignore[method-assign]
        event.remove(Engine, "before_cursor_execute", record)


def inserts(statements: list[str]) -> int:
    return sum("INSERT INTO async_jobs" in s for s in statements)


def updates(statements: list[str]) -> int:
    return sum("UPDATE async_jobs" in s for s in statements)


def scenario(prefix: str) -> list[tuple[NewJob, OnDuplicate]]:
    """Duplicates and request_id repeats among each other and against existing jobs
    (`{prefix}old`, request_id `{prefix}rq-old`, made before)."""
    p = prefix
    return [
        (new_job(f"{p}a"), REJECT),
        (new_job(f"{p}a"), REJECT),  # active duplicate inside the batch
        (new_job(f"{p}a"), RETURN),  # ... returned instead
        (new_job(f"{p}b", request_id=f"{p}rq-1"), REJECT),
        (new_job(f"{p}c", request_id=f"{p}rq-1"), REJECT),  # request_id repeat in the batch
        (new_job(f"{p}b", request_id=f"{p}rq-2"), RETURN),  # new request_id, active target
        (new_job(f"{p}old"), REJECT),  # duplicate of an existing job
        (new_job(f"{p}old"), RETURN),
        (new_job(f"{p}x", request_id=f"{p}rq-old"), REJECT),  # repeat of an existing request
        *((new_job(f"{p}n{i}", request_id=f"{p}n-rq{i}"), REJECT) for i in range(40)),
        (new_job(f"{p}n7"), RETURN),  # a duplicate near the end
    ]


def shapes(
    outcomes: list[tuple[Job, bool] | BaseException], known: dict[str, str]
) -> list[tuple[str, str]]:
    """Each outcome as (kind, whose job): the job named by the first item (or existing
    job) it belongs to, so two runs with different ids and prefixes compare."""
    names = dict(known)
    result: list[tuple[str, str]] = []
    for index, outcome in enumerate(outcomes):
        if isinstance(outcome, DuplicateJobError):
            result.append(("duplicate", names[outcome.existing_job_id]))
        elif isinstance(outcome, BaseException):
            result.append(("error", type(outcome).__name__))
        else:
            job, deduplicated = outcome
            if not deduplicated:
                assert job.id not in names
                names[job.id] = f"item-{index}"
                result.append(("new", names[job.id]))
            else:
                result.append(("deduplicated", names[job.id]))
    return result


async def _existing(store: JobStore, prefix: str) -> dict[str, str]:
    old = await enqueue(store, f"{prefix}old")
    old_request = await enqueue(store, f"{prefix}oldr", request_id=f"{prefix}rq-old")
    return {old.id: "old", old_request.id: "old-request"}


async def _one(
    store: JobStore, new: NewJob, on_duplicate: OnDuplicate
) -> tuple[Job, bool] | BaseException:
    try:
        return await store.commands.enqueue(EnqueueParams(job=new, on_duplicate=on_duplicate))
    except DuplicateJobError as error:
        return error


async def test_concurrent_enqueues_have_the_outcomes_of_one_at_a_time(
    store: JobStore,
) -> None:
    known_one = await _existing(store, "s-")
    one_at_a_time = [await _one(store, n, d) for n, d in scenario("s-")]

    known_batch = await _existing(store, "b-")
    with batch_statements() as seen:
        together = list(await asyncio.gather(*(_one(store, n, d) for n, d in scenario("b-"))))

    if isinstance(store, SqlJobStore):
        # All 50 went into one multi-row INSERT; the refused ones were then resolved alone.
        assert inserts(seen) == 1
    assert shapes(together, known_batch) == shapes(one_at_a_time, known_one)
    expected_new = 1 + 1 + 40  # a, b (rq-1), n0..n39
    assert sum(1 for s in shapes(together, known_batch) if s[0] == "new") == expected_new
    for outcome in together:
        if not isinstance(outcome, BaseException):
            job, _ = outcome
            assert await store.queries.get(job.id) == job


async def test_batched_enqueue_returns_the_same_job_as_a_single_one(
    sql_store: SqlJobStore, clock: FakeClock
) -> None:
    store = sql_store
    params = {"text": '오늘은 "큐"를 배웠다 📝', "title": "TIL"}
    jobs = await asyncio.gather(
        *(
            store.commands.enqueue(
                EnqueueParams(
                    job=new_job(f"same-{i}", params=params, request_id=f"r-{i}"),
                    on_duplicate=REJECT,
                )
            )
            for i in range(3)
        )
    )
    single, _ = await store.commands._enqueue_one(new_job("single", params=params), REJECT)
    for job, deduplicated in jobs:
        assert not deduplicated
        assert job.status is JobStatus.PENDING and job.attempts == () and job.attempt_count == 0
        assert job.request_params == params == single.request_params
        assert job.created_at == job.updated_at == clock.now == single.created_at
        assert job.requested_by == "tester" and job.max_attempts == 3
        assert job.result is None and job.error_message is None and job.claim_token is None
        assert await store.queries.get(job.id) == job
    assert await store.worker.next_due_at() == clock.now
    assert [
        c.job.id for c in await store.worker.claim(ClaimParams(limit=10, lease_seconds=60))
    ] != []


async def test_batches_follow_the_load_and_split_at_the_maximum(sql_store: SqlJobStore) -> None:
    store = sql_store
    with batch_statements() as seen:
        job, _ = await store.commands.enqueue(
            EnqueueParams(job=new_job("lone"), on_duplicate=REJECT)
        )
    assert inserts(seen) == 1 and job.status is JobStatus.PENDING  # alone: no waiting

    count = MAX_BATCH + 20
    with batch_statements() as seen:
        results = await asyncio.gather(
            *(
                store.commands.enqueue(EnqueueParams(job=new_job(f"many-{i}"), on_duplicate=REJECT))
                for i in range(count)
            )
        )
    assert inserts(seen) == 2
    assert len({job.id for job, _ in results}) == count
    stats = await store.queries.stats()
    assert sum(c.count for c in stats.counts) == count + 1


async def test_enqueue_is_committed_when_it_returns(open_store: OpenStore) -> None:
    writer = open_store("writer")
    reader = open_store("reader")
    try:

        async def enqueue_then_read(i: int) -> None:
            job, _ = await writer.commands.enqueue(
                EnqueueParams(job=new_job(f"seen-{i}"), on_duplicate=REJECT)
            )
            # Another engine, another connection: only committed rows are visible there.
            assert await reader.queries.get(job.id) == job

        await asyncio.gather(*(enqueue_then_read(i) for i in range(60)))
    finally:
        await writer.close()
        await reader.close()


async def test_a_row_the_database_refuses_fails_only_its_own_caller(store: JobStore) -> None:
    good = [new_job(f"ok-{i}") for i in range(5)]
    bad = new_job("bad", max_attempts=0)  # breaks CHECK (max_attempts >= 1)
    results = await asyncio.gather(
        *(
            store.commands.enqueue(EnqueueParams(job=n, on_duplicate=REJECT))
            for n in [*good[:3], bad, *good[3:]]
        ),
        return_exceptions=True,
    )
    # A CHECK violation nothing handles: ours (INTERNAL), not an outage.
    assert isinstance(results[3], StorageFailureError)
    written = [r for i, r in enumerate(results) if i != 3]
    assert all(isinstance(r, tuple) and not r[1] for r in written)
    stats = await store.queries.stats()
    assert sum(c.count for c in stats.counts) == 5


async def _claimed(store: JobStore, count: int, prefix: str) -> dict[str, str]:
    for i in range(count):
        await enqueue(store, f"{prefix}{i}")
    return {
        c.job.id: c.token
        for c in await store.worker.claim(ClaimParams(limit=count, lease_seconds=60))
    }


async def test_concurrent_completes_only_stale_tokens_lose_their_lease(
    store: JobStore, clock: FakeClock
) -> None:
    tokens = await _claimed(store, 30, "done-")
    ids = list(tokens)
    stale_token = set(ids[::5])  # a token that is not (or no longer) the job's
    cancelled = set(ids[1::7]) - stale_token  # cancelled: claim token cleared
    for job_id in cancelled:
        await store.commands.cancel(CancelParams(job_id=job_id, reason="test"))
    clock.advance(3)
    result = {"summary": "요약", "tags": ["t"], "embedding": [0.5, 1.0], "model": "m"}

    async def complete(job_id: str) -> Job:
        token = "not-the-token" if job_id in stale_token else tokens[job_id]
        return await store.worker.complete(
            CompleteParams(job_id=job_id, token=token, result=result)
        )

    with batch_statements() as seen:
        outcomes = await asyncio.gather(*(complete(i) for i in ids), return_exceptions=True)
    if isinstance(store, SqlJobStore):
        assert updates(seen) == 1

    for job_id, outcome in zip(ids, outcomes, strict=True):
        if job_id in stale_token or job_id in cancelled:
            assert isinstance(outcome, LeaseLostError) and outcome.job_id == job_id
            job = await store.queries.get(job_id)
            assert job.status is (
                JobStatus.CANCELLED if job_id in cancelled else JobStatus.PROCESSING
            )
            assert job.result is None
        else:
            assert isinstance(outcome, Job)
            assert outcome.id == job_id and outcome.status is JobStatus.COMPLETED
            assert outcome.result == result and outcome.completed_at == clock.now
            assert outcome.claim_token is None and outcome.lease_expires_at is None
            assert outcome.attempts[-1].end_time == clock.now
            assert await store.queries.get(job_id) == outcome


async def test_the_same_job_twice_in_one_burst_completes_once(store: JobStore) -> None:
    tokens = await _claimed(store, 1, "twice-")
    ((job_id, token),) = tokens.items()
    outcomes = await asyncio.gather(
        store.worker.complete(CompleteParams(job_id=job_id, token=token, result={"model": "a"})),
        store.worker.complete(CompleteParams(job_id=job_id, token=token, result={"model": "b"})),
        return_exceptions=True,
    )
    assert isinstance(outcomes[0], Job) and outcomes[0].result == {"model": "a"}
    assert isinstance(outcomes[1], LeaseLostError)
    assert (await store.queries.get(job_id)).result == {"model": "a"}


async def test_concurrent_failures_retry_or_fail_per_row(store: JobStore, clock: FakeClock) -> None:
    tokens = await _claimed(store, 12, "fail-")
    ids = list(tokens)
    retry_at = clock.now + timedelta(seconds=30)
    transient = Failure(code="UNAVAILABLE", reason="GATEWAY_DOWN", message="down", transient=True)

    async def fail(index: int, job_id: str) -> Job:
        token = "stale" if index % 4 == 3 else tokens[job_id]
        if index % 2 == 0:
            return await store.worker.fail(
                FailParams(job_id=job_id, token=token, failure=transient, retry_at=retry_at)
            )
        return await store.worker.fail(
            FailParams(
                job_id=job_id, token=token, failure=failure("Timeout: 너무 오래"), retry_at=None
            )
        )

    with batch_statements() as seen:
        outcomes = await asyncio.gather(
            *(fail(i, j) for i, j in enumerate(ids)), return_exceptions=True
        )
    if isinstance(store, SqlJobStore):
        assert updates(seen) == 1

    for index, (job_id, outcome) in enumerate(zip(ids, outcomes, strict=True)):
        if index % 4 == 3:
            assert isinstance(outcome, LeaseLostError) and outcome.job_id == job_id
            assert (await store.queries.get(job_id)).status is JobStatus.PROCESSING
            continue
        assert isinstance(outcome, Job) and outcome.claim_token is None
        attempt = outcome.attempts[-1]
        assert attempt.end_time == clock.now
        if index % 2 == 0:
            assert outcome.status is JobStatus.PENDING
            assert outcome.next_attempt_at == retry_at and outcome.failed_at is None
            assert (outcome.error_code, outcome.error_reason) == ("UNAVAILABLE", "GATEWAY_DOWN")
            assert (attempt.error_code, attempt.error_message) == ("UNAVAILABLE", "down")
        else:
            assert outcome.status is JobStatus.FAILED
            assert outcome.failed_at == clock.now and outcome.next_attempt_at is None
            assert outcome.error_message == attempt.error_message == "Timeout: 너무 오래"
        assert await store.queries.get(job_id) == outcome
    # The retries are due at retry_at, not before.
    assert await store.worker.claim(ClaimParams(limit=100, lease_seconds=60)) == []
    clock.advance(30)
    assert len(await store.worker.claim(ClaimParams(limit=100, lease_seconds=60))) == 6


@pytest.mark.postgres
async def test_an_outcome_the_database_refuses_fails_only_its_own_caller(
    clean_postgres_url: str, clock: FakeClock
) -> None:
    store = SqlJobStore(clean_postgres_url, instance_id="a", clock=clock)
    try:
        tokens = await _claimed(store, 4, "refused-")
        ids = list(tokens)
        too_long = Failure(code="X" * 100, reason="", message="m", transient=False)  # > 64

        async def fail(job_id: str) -> Job:
            chosen = too_long if job_id == ids[2] else failure()
            return await store.worker.fail(
                FailParams(job_id=job_id, token=tokens[job_id], failure=chosen, retry_at=None)
            )

        outcomes = await asyncio.gather(*(fail(i) for i in ids), return_exceptions=True)
        assert isinstance(outcomes[2], StorageDataError)  # SQLSTATE 22001
        for index, outcome in enumerate(outcomes):
            if index != 2:
                assert isinstance(outcome, Job) and outcome.status is JobStatus.FAILED
        assert (await store.queries.get(ids[2])).status is JobStatus.PROCESSING
    finally:
        await store.close()
