"""JobStore.enqueue_many (BatchEnqueue's store method), on every store (conftest.py):
each item as `enqueue` would store it, in order, its own error as its outcome."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest
from _storage_support import enqueue, new_job
from sqlalchemy import Engine, event

from san_jobs.job_service.domain.errors import (
    DuplicateJobError,
    StorageError,
    StorageUnavailableError,
)
from san_jobs.job_service.domain.model import (
    ACTIVE_STATUSES,
    Job,
    JobFilter,
    JobType,
    NewJob,
    OnDuplicate,
)
from san_jobs.job_service.domain.ports import (
    CancelParams,
    EnqueueOutcome,
    EnqueueParams,
    JobStore,
    ListJobsParams,
)
from san_jobs.job_service.storage.direct import DirectStatement, HeldConnection
from san_jobs.job_service.storage.job_commands import SqlJobCommands
from san_jobs.job_service.storage.repository import MAX_BATCH, SqlJobStore

REJECT, RETURN = OnDuplicate.REJECT, OnDuplicate.RETURN_EXISTING


def items(*news: NewJob, on_duplicate: OnDuplicate = REJECT) -> list[EnqueueParams]:
    return [EnqueueParams(new, on_duplicate) for new in news]


def job_of(outcome: EnqueueOutcome, *, deduplicated: bool = False) -> Job:
    assert isinstance(outcome, tuple), outcome
    assert outcome[1] is deduplicated
    return outcome[0]


def duplicate_of(outcome: EnqueueOutcome) -> str:
    assert isinstance(outcome, DuplicateJobError), outcome
    return outcome.existing_job_id


async def all_jobs(store: JobStore) -> list[Job]:
    jobs, token = await store.queries.list_jobs(
        ListJobsParams(job_filter=JobFilter(), page_size=1_000, page_token=None)
    )
    while token is not None:
        page, token = await store.queries.list_jobs(
            ListJobsParams(job_filter=JobFilter(), page_size=1_000, page_token=token)
        )
        jobs += page
    return jobs


async def active_by_target(store: JobStore) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for job in await all_jobs(store):
        if job.status in ACTIVE_STATUSES:
            found.setdefault(job.target_id, []).append(job.id)
    return found


async def test_new_items_are_stored_and_returned_in_order(store: JobStore) -> None:
    news = [new_job(f"t-{i}", params={"text": f"text {i}"}) for i in range(5)]
    outcomes = await store.commands.enqueue_many(items(*news))
    jobs = [job_of(o) for o in outcomes]
    assert [j.target_id for j in jobs] == [f"t-{i}" for i in range(5)]
    for job, new in zip(jobs, news, strict=True):
        assert await store.queries.get(job.id) == job
        assert job.request_params == new.request_params


async def test_each_kind_of_duplicate_is_answered_as_enqueue_would(store: JobStore) -> None:
    held = await enqueue(store, "held")
    keyed = await enqueue(store, "keyed", request_id="key-1")
    outcomes = await store.commands.enqueue_many(
        [
            EnqueueParams(new_job("held"), REJECT),  # 0: an active job exists
            EnqueueParams(new_job("held"), RETURN),  # 1: ... returned instead
            EnqueueParams(new_job("other", request_id="key-1"), REJECT),  # 2: a known request_id
            EnqueueParams(new_job("a"), REJECT),  # 3: new
            EnqueueParams(new_job("a"), REJECT),  # 4: the same target as item 3
            EnqueueParams(new_job("a"), RETURN),  # 5: ... returned instead
            EnqueueParams(new_job("b", request_id="key-2"), REJECT),  # 6: new
            EnqueueParams(new_job("c", request_id="key-2"), REJECT),  # 7: item 6's key
            EnqueueParams(
                new_job("a", job_type=JobType.TIL_GENERATION), REJECT
            ),  # 8: another type: new
        ]
    )
    assert len(outcomes) == 9
    assert duplicate_of(outcomes[0]) == held.id
    assert job_of(outcomes[1], deduplicated=True).id == held.id
    assert job_of(outcomes[2], deduplicated=True).id == keyed.id
    first_a = job_of(outcomes[3])
    assert duplicate_of(outcomes[4]) == first_a.id
    assert job_of(outcomes[5], deduplicated=True).id == first_a.id
    b = job_of(outcomes[6])
    assert job_of(outcomes[7], deduplicated=True).id == b.id
    til = job_of(outcomes[8])
    assert {j.id for j in await all_jobs(store)} == {held.id, keyed.id, first_a.id, b.id, til.id}


async def test_a_target_whose_job_ended_takes_a_new_one(store: JobStore) -> None:
    ended = await enqueue(store, "t")
    await store.commands.cancel(CancelParams(job_id=ended.id, reason="test"))
    (outcome,) = await store.commands.enqueue_many(items(new_job("t")))
    assert job_of(outcome).id != ended.id


async def test_a_batch_sent_again_returns_the_same_jobs(store: JobStore) -> None:
    news = [new_job(f"t-{i}", request_id=f"r-{i}") for i in range(20)]
    first = [job_of(o).id for o in await store.commands.enqueue_many(items(*news))]
    again = [
        job_of(o, deduplicated=True).id for o in await store.commands.enqueue_many(items(*news))
    ]
    assert again == first
    assert len(await all_jobs(store)) == 20


async def test_more_items_than_one_statement_holds(store: JobStore) -> None:
    count = 2 * MAX_BATCH + 7
    news = [new_job(f"n-{i}") for i in range(count)]
    # The last item repeats a target of the first statement's rows.
    outcomes = await store.commands.enqueue_many(items(*news, new_job("n-3")))
    jobs = [job_of(o) for o in outcomes[:count]]
    assert [j.target_id for j in jobs] == [f"n-{i}" for i in range(count)]
    assert duplicate_of(outcomes[count]) == jobs[3].id
    assert len(await all_jobs(store)) == count


async def test_batches_and_single_enqueues_racing_on_the_same_targets(store: JobStore) -> None:
    """Two batches of the same targets in opposite orders (on PostgreSQL they once
    deadlocked) and single enqueues, at once: one active job per target, and every
    answer names it."""
    targets = [f"race-{i}" for i in range(60)]

    async def single(target: str) -> list[tuple[str, EnqueueOutcome]]:
        try:
            return [
                (
                    target,
                    await store.commands.enqueue(
                        EnqueueParams(job=new_job(target), on_duplicate=REJECT)
                    ),
                )
            ]
        except DuplicateJobError as error:
            return [(target, error)]

    async def batched(order: list[str]) -> list[tuple[str, EnqueueOutcome]]:
        outcomes = await store.commands.enqueue_many(items(*(new_job(t) for t in order)))
        return list(zip(order, outcomes, strict=True))

    calls = [batched(targets), batched(targets[::-1]), batched(targets[10:30])]
    calls += [single(t) for t in targets[::4]]
    answers = [a for group in await asyncio.gather(*calls) for a in group]

    active = await active_by_target(store)
    assert sorted(active) == sorted(targets)
    assert all(len(ids) == 1 for ids in active.values())
    created: dict[str, int] = {}
    for target, outcome in answers:
        if isinstance(outcome, DuplicateJobError):
            assert outcome.existing_job_id == active[target][0]
        else:
            assert job_of(outcome).id == active[target][0]
            created[target] = created.get(target, 0) + 1
    assert created == {t: 1 for t in targets}  # each target created exactly once


async def test_a_row_the_table_refuses_fails_alone(store: JobStore) -> None:
    bad = replace(new_job("bad"), max_attempts=0)  # breaks ck_async_jobs_max_attempts
    outcomes = await store.commands.enqueue_many(items(new_job("ok-1"), bad, new_job("ok-2")))
    assert isinstance(outcomes[1], StorageError)
    assert not isinstance(outcomes[1], StorageUnavailableError)
    assert [job_of(outcomes[0]).target_id, job_of(outcomes[2]).target_id] == ["ok-1", "ok-2"]
    assert {j.target_id for j in await all_jobs(store)} == {"ok-1", "ok-2"}


async def test_an_unreachable_database_fails_the_whole_call() -> None:
    broken = SqlJobStore("postgresql+asyncpg://postgres@127.0.0.1:1/none")
    try:
        with pytest.raises(StorageUnavailableError):
            await broken.commands.enqueue_many(items(new_job("x"), new_job("y")))
    finally:
        await broken.close()


# -- items the INSERT left out, resolved per chunk (a resent batch) -----------------


@contextmanager
def statements_on_jobs() -> Iterator[list[str]]:
    """The SQL of every statement on async_jobs run meanwhile, through SQLAlchemy
    or directly on asyncpg (the hot statements on PostgreSQL)."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "async_jobs" in statement:
            seen.append(statement)

    direct_fetch = HeldConnection.fetch

    async def fetch(
        held: HeldConnection, statement: DirectStatement, params: Mapping[str, Any]
    ) -> list[Any]:
        record(None, None, statement.sql)
        return await direct_fetch(held, statement, params)

    event.listen(Engine, "before_cursor_execute", record)
    HeldConnection.fetch = fetch  # type: ignore[method-assign,assignment]
    try:
        yield seen
    finally:
        HeldConnection.fetch = direct_fetch  # type: ignore[method-assign]
        event.remove(Engine, "before_cursor_execute", record)


async def test_a_resent_keyed_batch_takes_one_lookup_per_chunk(sql_store: SqlJobStore) -> None:
    """Sent again, 2 chunks of keyed items: per chunk its INSERT (which stores
    nothing) and one SELECT by request_id; before, 2 round trips per item."""
    news = [new_job(f"t-{i}", request_id=f"r-{i}") for i in range(MAX_BATCH + 100)]
    first = [job_of(o) for o in await sql_store.commands.enqueue_many(items(*news))]
    with statements_on_jobs() as seen:
        again = [
            job_of(o, deduplicated=True)
            for o in await sql_store.commands.enqueue_many(items(*news))
        ]
    assert again == first
    assert sum("INSERT" in s for s in seen) == 2
    assert sum(s.lstrip().startswith("SELECT") for s in seen) == 2
    assert len(seen) == 4


async def test_resent_unkeyed_items_take_one_lookup_per_chunk(sql_store: SqlJobStore) -> None:
    """Without request_ids: one SELECT of the active jobs of the chunk's targets
    (per job type), REJECT naming the job and RETURN_EXISTING giving it back."""
    news = [new_job(f"t-{i}") for i in range(30)]
    news += [new_job(f"t-{i}", job_type=JobType.TIL_GENERATION) for i in range(5)]
    first = [job_of(o) for o in await sql_store.commands.enqueue_many(items(*news))]
    with statements_on_jobs() as seen:
        rejected = await sql_store.commands.enqueue_many(items(*news))
        returned = await sql_store.commands.enqueue_many(items(*news, on_duplicate=RETURN))
    assert [duplicate_of(o) for o in rejected] == [j.id for j in first]
    assert [job_of(o, deduplicated=True) for o in returned] == first
    # Per call: the INSERT, then one SELECT per job type.
    assert len(seen) == 2 * (1 + 2)


async def test_new_and_resent_items_mixed(store: JobStore) -> None:
    old = [new_job(f"old-{i}", request_id=f"r-old-{i}") for i in range(10)]
    held = [job_of(o) for o in await store.commands.enqueue_many(items(*old))]
    fresh = [new_job(f"new-{i}", request_id=f"r-new-{i}") for i in range(10)]
    mixed = [item for pair in zip(old, fresh, strict=True) for item in pair]
    outcomes = await store.commands.enqueue_many(items(*mixed))
    assert [job_of(o, deduplicated=True) for o in outcomes[::2]] == held
    created = [job_of(o) for o in outcomes[1::2]]
    assert [j.target_id for j in created] == [f"new-{i}" for i in range(10)]
    assert len(await all_jobs(store)) == 20


async def test_resent_active_duplicates_reject_or_return_per_item(store: JobStore) -> None:
    a, b = (job_of(o) for o in await store.commands.enqueue_many(items(new_job("a"), new_job("b"))))
    outcomes = await store.commands.enqueue_many(
        [
            EnqueueParams(new_job("a"), REJECT),
            EnqueueParams(new_job("b"), RETURN),
            EnqueueParams(new_job("a"), RETURN),
        ]
    )
    assert duplicate_of(outcomes[0]) == a.id
    assert job_of(outcomes[1], deduplicated=True) == b
    assert job_of(outcomes[2], deduplicated=True) == a


async def test_repeats_within_a_resent_batch(store: JobStore) -> None:
    """Each repeat is answered against the one job: the request_id's, else the
    target's, as for a first send."""
    keyed = job_of((await store.commands.enqueue_many(items(new_job("k", request_id="rk"))))[0])
    outcomes = await store.commands.enqueue_many(
        [
            EnqueueParams(new_job("k", request_id="rk"), REJECT),  # the stored request: its job
            EnqueueParams(new_job("other", request_id="rk"), REJECT),  # the same key: the same job
            EnqueueParams(new_job("k"), REJECT),  # no key, the target's active job: a duplicate
            EnqueueParams(new_job("k"), RETURN),  # ... or that job
            EnqueueParams(new_job("z"), REJECT),  # new
            EnqueueParams(new_job("z"), RETURN),  # the new one's target: the new job
        ]
    )
    assert job_of(outcomes[0], deduplicated=True) == keyed
    assert job_of(outcomes[1], deduplicated=True) == keyed
    assert duplicate_of(outcomes[2]) == keyed.id
    assert job_of(outcomes[3], deduplicated=True) == keyed
    z = job_of(outcomes[4])
    assert job_of(outcomes[5], deduplicated=True) == z
    assert len(await all_jobs(store)) == 2


async def test_a_job_that_ended_after_the_insert_is_enqueued_again(
    sql_store: SqlJobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race the lookups leave open: the job that kept an item out of the INSERT
    left the active states before the lookup. The item is then enqueued alone, as
    `enqueue` would: a new job."""
    held = await enqueue(sql_store, "t")
    insert_chunk = SqlJobCommands._insert_chunk

    async def insert_then_cancel(
        writes: SqlJobCommands, batch: Sequence[tuple[NewJob, OnDuplicate]], chunk: list[int]
    ) -> list[Job | None]:
        jobs = await insert_chunk(writes, batch, chunk)
        await sql_store.commands.cancel(CancelParams(job_id=held.id, reason="ended meanwhile"))
        return jobs

    monkeypatch.setattr(SqlJobCommands, "_insert_chunk", insert_then_cancel)
    (outcome,) = await sql_store.commands.enqueue_many(items(new_job("t")))
    created = job_of(outcome)
    assert created.id != held.id
    assert (await sql_store.queries.get(created.id)) == created


async def test_request_params_are_stored_as_sent(store: JobStore) -> None:
    """The batched INSERT carries request_params as JSON inside the row batch: text
    with quotes, escapes, Korean, nesting and numbers reads back as it was sent."""
    params: list[dict[str, Any]] = [
        {"text": '따옴표 "quoted" \\ back\nslash\t탭 \u2028', "url": "https://x.test/a?b=c&d"},
        {"text": "nested", "list": [1, 2.5, -3, None, True, {"k": ["v"]}], "empty": {}},
        {"text": "numbers", "big": 2**60, "small": 1e-7, "neg": -0.5},
        {},
    ]
    news = [new_job(f"p-{i}", params=p) for i, p in enumerate(params)]
    jobs = [job_of(o) for o in await store.commands.enqueue_many(items(*news))]
    for job, sent in zip(jobs, params, strict=True):
        assert job.request_params == sent
        stored = await store.queries.get(job.id)
        assert stored is not None and stored.request_params == sent
