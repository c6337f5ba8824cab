"""SqlJobCommands: the job commands' port (domain/ports.JobCommands) on `async_jobs`:
Enqueue (one job, or BatchEnqueue's many; a job with depends_on: dependencies.py),
CancelJob and RetryFailed. The worker's writes are worker_store.py's.

An Enqueue is one atomic `INSERT ... RETURNING` statement, run without BEGIN/COMMIT
round trips. Concurrent enqueues are coalesced (batching.py): the calls waiting at
the same time share ONE statement over a JSON array of rows, and each caller returns
only after that statement committed, with its own row's outcome.

A row the unique indexes refused is enqueued alone by `enqueue_in`: INSERT, then the
conflict's answer (enqueue_conflicts.conflict_answer), and again if the job that held
the key left the active states meanwhile. It is written once, here, and runs on the
connection it is given: an Enqueue's own (each statement committing alone), or the
transaction of a schedule's firing round, whose period's job commits with the move of
the schedule's next_fire_at (schedules.py says why that is not the port's `enqueue`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from san_jobs.job_service.domain.errors import (
    DuplicateJobError,
    InvalidJobStateError,
    InvalidRequestError,
    JobNotFoundError,
    StorageError,
    StorageUnavailableError,
)
from san_jobs.job_service.domain.job_ids import new_job_id, new_job_ids
from san_jobs.job_service.domain.model import (
    Job,
    NewJob,
    OnDuplicate,
    RetryOutcome,
)
from san_jobs.job_service.domain.ports import (
    CancelParams,
    EnqueueOutcome,
    EnqueueParams,
    RetryFailedParams,
)
from san_jobs.job_service.domain.transitions import (
    NOT_CANCELLABLE,
    RETRIED_BY_ANOTHER_CALL,
    active_holder_reason,
    cancel_message,
)
from san_jobs.job_service.storage import queries
from san_jobs.job_service.storage.batching import MAX_BATCH, GroupCommit, refused_for_its_data
from san_jobs.job_service.storage.connections import Connections, HotStatements
from san_jobs.job_service.storage.dependencies import DependentEnqueue
from san_jobs.job_service.storage.direct import StatementInDoubtError
from san_jobs.job_service.storage.enqueue_conflicts import (
    CONFLICT_TRIES,
    KEPT_CONFLICTING,
    conflict_answer,
    enqueue_row,
)
from san_jobs.job_service.storage.in_doubt import EnqueueInDoubtError, InsertInDoubt
from san_jobs.job_service.storage.json_sql import row_time
from san_jobs.job_service.storage.rows import chunks, pending_job
from san_jobs.job_service.storage.statements import Statements
from san_jobs.job_service.storage.transition_sql import Rows, time_params


class SqlJobCommands:
    """The job commands on SQLite or PostgreSQL: the store's connections, statements and
    clock, and `read_many` (the queries' get_many) for rows an in-doubt or refused
    statement left unknown. `enqueue_interval`: under load, the shortest time between
    two enqueue commits (batching.GroupCommit's min_interval)."""

    def __init__(
        self,
        *,
        db: Connections,
        sql: Statements,
        hot: HotStatements,
        now: Callable[[], datetime],
        read_many: Callable[[Sequence[str]], Awaitable[list[Job]]],
        enqueue_interval: float = 0.0,
    ) -> None:
        self._db = db
        self._sql = sql
        self._hot = hot
        self._now = now
        self._read_many = read_many
        # A job with depends_on: alone, in a transaction (dependencies.py).
        self._dependents = DependentEnqueue(db=db, sql=sql, now=now)
        # Group commit of the enqueues: concurrent calls share one statement.
        self._enqueues: GroupCommit[NewJob, Job | None] = GroupCommit(
            self._enqueue_batch, max_batch=MAX_BATCH, name="enqueue", min_interval=enqueue_interval
        )

    async def wait_idle(self) -> None:
        """Return once no enqueue waits for its statement (before the store closes)."""
        await self._enqueues.wait_idle()

    # -- enqueue ------------------------------------------------------------------------

    async def enqueue(self, params: EnqueueParams) -> tuple[Job, bool]:
        new, on_duplicate = params.job, params.on_duplicate
        if new.depends_on:
            return await self._dependents.enqueue(new, on_duplicate)
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
            return await self._dependents.enqueue(new, on_duplicate)
        async with self._db.single() as conn:
            return await self.enqueue_in(conn, EnqueueParams(job=new, on_duplicate=on_duplicate))

    async def enqueue_in(self, conn: AsyncConnection, params: EnqueueParams) -> tuple[Job, bool]:
        """Enqueue `params.job` (one without depends_on) on `conn`, in the transaction
        it may be in: (the new job, False), or the answer of the unique index that
        refused it (the tenant's job of its request_id, deduplicated; else the active
        job of its target, returned with RETURN_EXISTING, else DuplicateJobError). The
        key's holder may leave the active states between the INSERT and the answer:
        then it inserts again, at most CONFLICT_TRIES times in all. Enqueue's single
        path, and a schedule's period in its firing round (the module's docstring)."""
        new, on_duplicate = params.job, params.on_duplicate
        for _ in range(CONFLICT_TRIES):
            bound = time_params(self._now()) | self._sql.enqueue_params.bind(
                **enqueue_row(new_job_id(), new)
            )
            inserted = await self._db.jobs(conn, self._sql.enqueue, bound)
            if inserted:
                return inserted[0], False
            # ON CONFLICT DO NOTHING: a unique index stopped it, without an error.
            answer = await conflict_answer(self._db, self._sql, conn, new, on_duplicate)
            if answer is not None:
                return answer
        raise StorageUnavailableError(KEPT_CONFLICTING)

    # -- cancel and RetryFailed ---------------------------------------------------------

    async def cancel(self, params: CancelParams) -> Job:
        job_id, reason, owner = params.job_id, params.reason, params.owner
        sql = self._sql
        args = {"job_id": job_id, "cancel_reason": reason, "cancel_message": cancel_message(reason)}
        statement = sql.cancel
        if owner is not None:
            statement, args = sql.cancel_owned, args | {"owner": owner}
        bound = time_params(self._now()) | sql.cancel_params.bind(**args)
        async with self._db.single() as conn:
            jobs = await self._db.jobs(conn, statement, bound)
            if jobs:
                return jobs[0]
            current = await self._db.jobs(conn, sql.by_id, {"p_id": job_id})
        if not current or (owner is not None and current[0].requested_by != owner):
            raise JobNotFoundError(job_id)  # another's job does not exist for this caller
        raise InvalidJobStateError(job_id, current[0].status.value, NOT_CANCELLABLE)

    async def retry_failed(self, params: RetryFailedParams) -> RetryOutcome:
        now = self._now()
        db = self._db
        dry_run = params.dry_run
        candidates_stmt = queries.retry_candidates(
            queries.job_filter(params.job_filter, db.pg), params.limit, lock=db.pg and not dry_run
        )
        async with db.single() if dry_run else db.tx() as conn:
            # A job's slot is its tenant's (job_type, target_id): another tenant's
            # active job of the same target holds no slot of its.
            candidates = [
                (r.id, (r.tenant or "", r.job_type, r.target_id))
                for r in await conn.execute(candidates_stmt)
            ]
            active = await self._active_by_target(conn, {c[1][2] for c in candidates})
            to_move: list[str] = []
            skipped: list[tuple[str, str]] = []
            for job_id, slot in candidates:
                holder = active.get(slot)
                if holder is not None:
                    skipped.append((job_id, active_holder_reason(holder)))
                else:
                    # Two FAILED jobs of one slot: the first (oldest failure) goes.
                    active[slot] = job_id
                    to_move.append(job_id)
            if dry_run or not to_move:
                return RetryOutcome(len(candidates), tuple(to_move), tuple(skipped))
            bound = time_params(now) | {"p_extra_attempts": max(1, params.extra_attempts)}
            moved = await self._move_failed(conn, to_move, bound, skipped)
        moved_ids = {job.id for job in moved}
        retried = tuple(i for i in to_move if i in moved_ids)
        for job_id in to_move:
            if job_id not in moved_ids and all(s[0] != job_id for s in skipped):
                skipped.append((job_id, RETRIED_BY_ANOTHER_CALL))
        return RetryOutcome(len(candidates), retried, tuple(skipped))

    async def _active_by_target(
        self, conn: AsyncConnection, target_ids: set[str]
    ) -> dict[tuple[str, str, str], str]:
        """The active job of each (tenant, job_type, target_id) among these targets."""
        found: dict[tuple[str, str, str], str] = {}
        for chunk in chunks(sorted(target_ids)):
            for row in await conn.execute(queries.active_for_targets(chunk)):
                found[(row.tenant or "", row.job_type, row.target_id)] = row.id
        return found

    async def _move_failed(
        self,
        conn: AsyncConnection,
        job_ids: list[str],
        params: dict[str, object],
        skipped: list[tuple[str, str]],
    ) -> list[Job]:
        """FAILED -> PENDING for `job_ids` (only those still FAILED). If an active job
        appeared since the pre-check, the unique index refuses the batch: then job by
        job, each in a savepoint, skipping the refused ones."""
        retry = self._sql.retry_failed

        async def move(ids: list[str]) -> list[Job]:
            return await self._db.jobs(conn, retry, params | {"p_job_ids": ids})

        moved: list[Job] = []
        try:
            async with conn.begin_nested():
                for chunk in chunks(job_ids):
                    moved.extend(await move(list(chunk)))
            return moved
        except IntegrityError:
            moved = []
        for job_id in job_ids:
            try:
                async with conn.begin_nested():
                    moved.extend(await move([job_id]))
            except IntegrityError:
                holder = await self._active_holder(conn, job_id)
                skipped.append((job_id, active_holder_reason(holder or "unknown")))
        return moved

    async def _active_holder(self, conn: AsyncConnection, job_id: str) -> str | None:
        """The id of the active job holding the (tenant, job_type, target_id) slot of
        `job_id`."""
        job = await self._db.jobs(conn, self._sql.by_id, {"p_id": job_id})
        if not job:
            return None
        params = {
            "p_job_type": job[0].job_type.value,
            "p_target_id": job[0].target_id,
            "p_tenant": job[0].tenant,
        }
        holders = await self._db.jobs(conn, self._sql.active_for_target, params)
        return holders[0].id if holders else None
