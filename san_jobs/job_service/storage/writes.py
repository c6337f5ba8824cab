"""Enqueue: one job, or BatchEnqueue's many (the worker's writes: worker_store.py).

An Enqueue is one atomic `INSERT ... RETURNING` statement, run without BEGIN/COMMIT
round trips. Concurrent enqueues are coalesced (batching.py): the calls waiting at
the same time share ONE statement over a JSON array of rows, and each caller returns
only after that statement committed, with its own row's outcome.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from san_jobs.job_service.domain.errors import (
    DuplicateJobError,
    InvalidRequestError,
    StorageError,
    StorageUnavailableError,
)
from san_jobs.job_service.domain.job_ids import new_job_id, new_job_ids
from san_jobs.job_service.domain.model import (
    Job,
    NewJob,
    OnDuplicate,
)
from san_jobs.job_service.domain.ports import (
    EnqueueOutcome,
    EnqueueParams,
)
from san_jobs.job_service.storage.batching import MAX_BATCH, GroupCommit, refused_for_its_data
from san_jobs.job_service.storage.connections import Connections, StoreParts
from san_jobs.job_service.storage.direct import StatementInDoubtError
from san_jobs.job_service.storage.in_doubt import EnqueueInDoubtError, InsertInDoubt
from san_jobs.job_service.storage.json_sql import row_time
from san_jobs.job_service.storage.rows import pending_job
from san_jobs.job_service.storage.statements import Statements
from san_jobs.job_service.storage.transition_sql import Rows, time_params


class JobWrites(StoreParts):
    # get_many (job_queries.py), for rows an in-doubt or refused statement left unknown.
    _read_many: Callable[[Sequence[str]], Awaitable[list[Job]]]

    async def _enqueue_with_dependencies(
        self, new: NewJob, on_duplicate: OnDuplicate
    ) -> tuple[Job, bool]:
        """A job with depends_on, alone, in a transaction (dependencies.py)."""
        raise NotImplementedError

    def _start_group_commits(self, enqueue_interval: float) -> None:
        # Group commit of the hot-path writes: concurrent calls share one statement.
        self._enqueues: GroupCommit[NewJob, Job | None] = GroupCommit(
            self._enqueue_batch, max_batch=MAX_BATCH, name="enqueue", min_interval=enqueue_interval
        )

    async def _wait_writes_idle(self) -> None:
        await self._enqueues.wait_idle()

    # -- enqueue ------------------------------------------------------------------------

    async def enqueue(self, params: EnqueueParams) -> tuple[Job, bool]:
        new, on_duplicate = params.job, params.on_duplicate
        if new.depends_on:
            return await self._enqueue_with_dependencies(new, on_duplicate)
        # Concurrent enqueues share one INSERT (group commit); the future resolves
        # after that statement committed. A row the unique indexes refused (a
        # request_id repeat, an active duplicate, also one within the same batch) is
        # then resolved alone, exactly as a single enqueue would be.
        try:
            inserted = await self._enqueues.submit(new)
        except EnqueueInDoubtError as doubt:
            # The INSERT's answer was lost: the caller hears OK or UNAVAILABLE only
            # once it is known which is true (see in_doubt.py).
            return await doubt.settle(), False
        if inserted is not None:
            return inserted, False
        return await self._enqueue_one(new, on_duplicate)

    async def enqueue_many(self, batch: Sequence[EnqueueParams]) -> list[EnqueueOutcome]:
        """BatchEnqueue's items: one INSERT per MAX_BATCH of them (the coalesced
        enqueues' statement, `_enqueue_batch`), then each row it did not insert
        resolved alone, in request order, as `enqueue` resolves one. An item that
        repeats an earlier item's request_id or (job_type, target_id), in the same
        tenant, is held out of the INSERT, so that the earlier one is the one stored
        and the later one is resolved against it (which row of one INSERT wins is not
        defined)."""
        # The private steps below work on (job, on_duplicate) pairs.
        items = [(item.job, item.on_duplicate) for item in batch]
        outcomes: list[EnqueueOutcome | None] = [None] * len(items)
        seen_keys: set[tuple[str, str, str]] = set()
        seen_request_ids: set[tuple[str, str]] = set()
        fresh: list[int] = []  # indexes of the items the INSERT carries
        for index, (new, _) in enumerate(items):
            key = (new.tenant, new.job_type.value, new.target_id)
            keyed = None if new.request_id is None else (new.tenant, new.request_id)
            if key in seen_keys or keyed in seen_request_ids or new.depends_on:
                # Resolved after the INSERT, against the earlier item; one with
                # dependencies alone, in a transaction of its own (dependencies.py).
                continue
            seen_keys.add(key)
            if keyed is not None:
                seen_request_ids.add(keyed)
            fresh.append(index)
        for start in range(0, len(fresh), MAX_BATCH):
            chunk = fresh[start : start + MAX_BATCH]
            for index, result in zip(chunk, await self._insert_chunk(items, chunk), strict=True):
                if result is not None:
                    outcomes[index] = (result, False)
        left = [index for index, outcome in enumerate(outcomes) if outcome is None]
        for start in range(0, len(left), MAX_BATCH):
            chunk = left[start : start + MAX_BATCH]
            for index, outcome in zip(chunk, await self._resolve_left(items, chunk), strict=True):
                outcomes[index] = outcome
        return [outcome for outcome in outcomes if outcome is not None]

    async def _resolve_left(
        self, items: Sequence[tuple[NewJob, OnDuplicate]], chunk: list[int]
    ) -> list[EnqueueOutcome]:
        """The outcomes of items the INSERT did not store, as `_enqueue_one` would
        give them, from two lookups for the whole chunk (per tenant: a BatchEnqueue's
        items are all its caller's, so one each): the jobs of their request_ids, then
        the active jobs of the targets of the rest (a resent batch of keyed items: one
        SELECT per chunk, not two or three round trips each). What neither finds (its
        job left the active states since the INSERT, or its own row was refused) is
        enqueued alone, in request order."""
        by_request_id, active = await self._existing_for([items[index][0] for index in chunk])
        outcomes: list[EnqueueOutcome] = []
        for index in chunk:
            new, on_duplicate = items[index]
            same = (
                by_request_id.get((new.tenant, new.request_id))
                if new.request_id is not None
                else None
            )
            existing = same or active.get((new.tenant, new.job_type.value, new.target_id))
            if same is not None:
                outcomes.append((same, True))
            elif existing is not None and on_duplicate is OnDuplicate.RETURN_EXISTING:
                outcomes.append((existing, True))
            elif existing is not None:
                outcomes.append(DuplicateJobError(existing.id))
            else:
                outcomes.append(await self._enqueue_alone(new, on_duplicate))
        return outcomes

    async def _existing_for(
        self, news: Sequence[NewJob]
    ) -> tuple[dict[tuple[str, str], Job], dict[tuple[str, str, str], Job]]:
        """The stored jobs that hold the keys of `news`, each within its tenant: by
        (tenant, request_id), and the active ones of the rest by (tenant, job_type,
        target_id). One lookup of each kind per tenant and job type."""
        by_request_id: dict[tuple[str, str], Job] = {}
        active: dict[tuple[str, str, str], Job] = {}
        keyed: dict[str, list[str]] = {}  # tenant -> its request ids
        for new in news:
            if new.request_id is not None:
                keyed.setdefault(new.tenant, []).append(new.request_id)
        async with self._db.single() as conn:
            for tenant, request_ids in keyed.items():
                params = {"p_request_ids": request_ids, "p_tenant": tenant}
                for job in await self._db.jobs(conn, self._sql.by_request_ids, params):
                    if job.request_id is not None:
                        by_request_id[tenant, job.request_id] = job
            targets: dict[tuple[str, str], set[str]] = {}  # (tenant, job_type) -> targets
            for new in news:
                if new.request_id is None or (new.tenant, new.request_id) not in by_request_id:
                    targets.setdefault((new.tenant, new.job_type.value), set()).add(new.target_id)
            for (tenant, job_type), target_ids in targets.items():
                params = {
                    "p_job_type": job_type,
                    "p_target_ids": sorted(target_ids),
                    "p_tenant": tenant,
                }
                for job in await self._db.jobs(conn, self._sql.active_for_targets, params):
                    active[tenant, job.job_type.value, job.target_id] = job
        return by_request_id, active

    async def _enqueue_alone(self, new: NewJob, on_duplicate: OnDuplicate) -> EnqueueOutcome:
        """One item by `_enqueue_one`; its own error (a duplicate, its data refused)
        as its outcome."""
        try:
            return await self._enqueue_one(new, on_duplicate)
        except (DuplicateJobError, InvalidRequestError) as error:  # depends_on's checks
            return error
        except StorageError as error:
            if not refused_for_its_data(error):
                raise  # the database, not this item: the whole call
            return error  # this item's data alone

    async def _insert_chunk(
        self, items: Sequence[tuple[NewJob, OnDuplicate]], chunk: list[int]
    ) -> list[Job | None]:
        """The items at `chunk` in one INSERT: per item its job, or None when not
        inserted. An answer lost in transit is settled first (in_doubt.py): the jobs
        if the INSERT committed, else StorageUnavailableError for the whole call."""
        try:
            results = await self._enqueue_batch([items[index][0] for index in chunk])
        except StorageError as error:
            if not refused_for_its_data(error):
                raise
            return [None] * len(chunk)  # each alone: only the bad one fails
        jobs: list[Job | None] = []
        for result in results:
            if isinstance(result, EnqueueInDoubtError):
                jobs.append(await result.settle())
            elif isinstance(result, BaseException):  # pragma: no cover - not made above
                raise result
            else:
                jobs.append(result)
        return jobs

    async def _enqueue_batch(self, batch: list[NewJob]) -> list[Job | BaseException | None]:
        """One INSERT ... ON CONFLICT DO NOTHING RETURNING id for the whole batch. Ids
        are made here, so the returned ids map back to their items; None = not
        inserted; an EnqueueInDoubtError each when the answer was lost. An inserted
        row holds exactly what was sent, so its Job is built here rather than decoded
        from the database."""
        ids = new_job_ids(len(batch))
        # Rows sorted by the active-target index's key (job_type, target_id, tenant)
        # (stable: among equal keys the earlier caller still goes first and wins):
        # every enqueue INSERT, of any instance, then takes the unique index's entries
        # in one order, so two INSERTs sharing targets wait for each other instead of
        # deadlocking (two BatchEnqueues of the same targets in opposite orders did, on
        # PostgreSQL). The callers of one batch may be several tenants: each row
        # carries its own, and the indexes judge each row within its tenant.
        order = sorted(
            range(len(batch)),
            key=lambda i: (batch[i].job_type.value, batch[i].target_id, batch[i].tenant),
        )
        rows = [enqueue_row(ids[i], batch[i]) for i in order]
        for row in rows:
            if row["scheduled_at"] is not None:  # a delayed job: its times as text
                row["scheduled_at"] = row_time(self._db.pg, row["scheduled_at"])
                row["not_before"] = row_time(self._db.pg, row["not_before"])
        now = self._now()
        try:
            written = await self._hot.enqueue_many.rows(time_params(now) | Rows.param(rows))
            inserted = {row["id"] for row in written}
        except StatementInDoubtError as error:
            doubt = InsertInDoubt(self._db.autocommit, error.backend, ids, self._read_many)
            return [EnqueueInDoubtError(job_id, doubt, error) for job_id in ids]
        except StorageError as error:
            if len(batch) > 1 and refused_for_its_data(error):
                return [None] * len(batch)  # each alone: only the bad one fails
            raise
        return [
            pending_job(job_id, new, now) if job_id in inserted else None
            for job_id, new in zip(ids, batch, strict=True)
        ]

    async def _enqueue_one(self, new: NewJob, on_duplicate: OnDuplicate) -> tuple[Job, bool]:
        if new.depends_on:
            return await self._enqueue_with_dependencies(new, on_duplicate)
        for _ in range(CONFLICT_TRIES):
            async with self._db.single() as conn:
                answer = await insert_or_answer(
                    self._db, self._sql, self._now(), conn, new, on_duplicate
                )
            if answer is not None:
                return answer
        raise StorageUnavailableError(KEPT_CONFLICTING)


def enqueue_row(job_id: str, new: NewJob) -> dict[str, Any]:
    """ENQUEUE's arguments for `new` (the single INSERT binds them), which are also
    its JSON row for the batched INSERT (`Statements.enqueue_rows`), used as they
    are: the generic `enqueue_rows.row(**enqueue_row(...))`'s kwargs, key check
    and per-field loops were ~8 % of the job-service's CPU in a BatchEnqueue (issue
    15). The same row but for `request_params`, which goes in as the JSON object
    itself rather than as its JSON text: both databases read an object in a text
    field as its JSON text (jsonb_to_recordset, `->>`), which the INSERT casts to the
    column's JSON, so the batch's one json_text does what was a second one per row
    (a unit test checks the fields, the storage tests what is stored)."""
    return {
        "job_id": job_id,
        "job_type": new.job_type.value,
        "target_id": new.target_id,
        "request_params": new.request_params,
        "requested_by": new.requested_by,
        "request_id": new.request_id,
        "max_attempts": new.max_attempts,
        "traceparent": new.traceparent,
        "tenant": new.tenant,
        "scheduled_at": new.scheduled_at,
        "not_before": new.not_before,
        "priority": new.priority,
    }


# An Enqueue whose INSERT conflicted with a job that then left the active states (so
# nothing conflicts any more) inserts again, at most this many times in all.
CONFLICT_TRIES = 5
KEPT_CONFLICTING = "enqueue kept conflicting with jobs that changed state"


async def insert_or_answer(
    db: Connections,
    sql: Statements,
    now: datetime,
    conn: AsyncConnection,
    new: NewJob,
    on_duplicate: OnDuplicate,
) -> tuple[Job, bool] | None:
    """One try of an Enqueue's INSERT, in `conn`: (the new job, False); else, the unique
    indexes having stopped it (ON CONFLICT DO NOTHING: no error), the conflict's answer
    (`conflict_answer`); None if the winner left the active states in between (insert
    again). Enqueue, a schedule's period and a dependent's conflict all answer so."""
    params = time_params(now) | sql.enqueue_params.bind(**enqueue_row(new_job_id(), new))
    inserted = await db.jobs(conn, sql.enqueue, params)
    if inserted:
        return inserted[0], False
    return await conflict_answer(db, sql, conn, new, on_duplicate)


async def conflict_answer(
    db: Connections,
    sql: Statements,
    conn: AsyncConnection,
    new: NewJob,
    on_duplicate: OnDuplicate,
) -> tuple[Job, bool] | None:
    """Enqueue's answer when its INSERT met a unique index: the job holding
    `new`'s request_id (deduplicated), else the active job of its target
    (returned, or DuplicateJobError); None if neither exists any more (it left the
    active states meanwhile: insert again). The winner is looked for in the
    caller's tenant only: the indexes refuse a row for its own tenant's keys alone."""
    if new.request_id is not None:
        same = await db.jobs(
            conn, sql.by_request_id, {"p_request_id": new.request_id, "p_tenant": new.tenant}
        )
        if same:
            return same[0], True
    active = await db.jobs(
        conn,
        sql.active_for_target,
        {
            "p_job_type": new.job_type.value,
            "p_target_id": new.target_id,
            "p_tenant": new.tenant,
        },
    )
    if not active:
        return None
    if on_duplicate is OnDuplicate.RETURN_EXISTING:
        return active[0], True
    raise DuplicateJobError(active[0].id)
