"""Enqueue and the worker's writes: claim, renew, complete, fail, release.

Every write is one atomic `UPDATE/INSERT ... RETURNING` statement, claim included,
run without BEGIN/COMMIT round trips. Concurrent enqueues, completions and failures
are coalesced (batching.py): the calls waiting at the same time share ONE statement
over a JSON array of rows, and each caller returns only after that statement
committed, with its own row's outcome.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

from job_service.domain.errors import (
    DuplicateJobError,
    LeaseLostError,
    StorageError,
    StorageUnavailableError,
)
from job_service.domain.job_ids import new_job_id
from job_service.domain.model import (
    AttemptUsage,
    Claim,
    Failure,
    Job,
    JobType,
    JsonDict,
    NewJob,
    OnDuplicate,
)
from job_service.domain.transitions import claim_type_args
from job_service.storage.batching import Coalescer
from job_service.storage.connections import Connections, HotStatement, HotStatements
from job_service.storage.direct import StatementInDoubtError
from job_service.storage.in_doubt import EnqueueInDoubtError, InsertInDoubt
from job_service.storage.rows import aware, pending_job
from job_service.storage.statements import P_LIMIT, P_MAX_PER_CALLER, Statements
from job_service.storage.transition_sql import Params, Rows, time_params

# Rows per group-commit statement (enqueue, complete, fail, renew).
MAX_BATCH = 500

# fail(): job id, claim token, time of the call, failure, retry_at.
_FailItem = tuple[str, str, datetime, Failure, datetime | None]
# complete(): job id, claim token, time of the call, result.
_CompleteItem = tuple[str, str, datetime, JsonDict, AttemptUsage | None]


def _refused_for_its_data(error: StorageError) -> bool:
    """A statement refused for the data of some row (a CHECK, a too-long value, as
    classified by storage/errors.py): in a batch, each row is then written alone so
    only its own caller hears of it. Not for connection trouble: a batch that may
    have committed is never written again."""
    return not isinstance(error, StorageUnavailableError)


class JobWrites:
    def __init__(
        self,
        connections: Connections,
        sql: Statements,
        hot: HotStatements,
        now: Callable[[], datetime],
        read_many: Callable[[Sequence[str]], Awaitable[list[Job]]],
        *,
        enqueue_interval: float,
    ) -> None:
        self._db = connections
        self._sql = sql
        self._hot = hot
        self._now = now
        self._read_many = read_many
        # Group commit of the hot-path writes: concurrent calls share one statement.
        self._enqueues: Coalescer[NewJob, Job | None] = Coalescer(
            self._enqueue_batch, max_batch=MAX_BATCH, name="enqueue", min_interval=enqueue_interval
        )
        self._completes: Coalescer[_CompleteItem, Job | None] = Coalescer(
            self._complete_batch, max_batch=MAX_BATCH, name="complete", key=lambda i: i[0]
        )
        self._fails: Coalescer[_FailItem, Job | None] = Coalescer(
            self._fail_batch, max_batch=MAX_BATCH, name="fail", key=lambda i: i[0]
        )

    async def wait_idle(self) -> None:
        for coalescer in (self._enqueues, self._completes, self._fails):
            await coalescer.wait_idle()

    # -- enqueue ------------------------------------------------------------------------

    async def enqueue(self, new: NewJob, on_duplicate: OnDuplicate) -> tuple[Job, bool]:
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

    async def _enqueue_batch(self, batch: list[NewJob]) -> list[Job | BaseException | None]:
        """One INSERT ... ON CONFLICT DO NOTHING RETURNING id for the whole batch. Ids
        are made here, so the returned ids map back to their items; None = not
        inserted; an EnqueueInDoubtError each when the answer was lost. An inserted
        row holds exactly what was sent, so its Job is built here rather than decoded
        from the database."""
        ids = [new_job_id() for _ in batch]
        new_rows = self._sql.enqueue_rows
        rows = [
            new_rows.row(**_enqueue_args(job_id, new))
            for job_id, new in zip(ids, batch, strict=True)
        ]
        now = self._now()
        try:
            written = await self._hot.enqueue_many.rows(time_params(now) | Rows.param(rows))
            inserted = {row["id"] for row in written}
        except StatementInDoubtError as error:
            doubt = InsertInDoubt(self._db.autocommit, error.backend, ids, self._read_many)
            return [EnqueueInDoubtError(job_id, doubt, error) for job_id in ids]
        except StorageError as error:
            if len(batch) > 1 and _refused_for_its_data(error):
                return [None] * len(batch)  # each alone: only the bad one fails
            raise
        return [
            pending_job(job_id, new, now) if job_id in inserted else None
            for job_id, new in zip(ids, batch, strict=True)
        ]

    async def _enqueue_one(self, new: NewJob, on_duplicate: OnDuplicate) -> tuple[Job, bool]:
        sql = self._sql
        params = time_params(self._now()) | sql.enqueue_params.bind(
            **_enqueue_args(new_job_id(), new)
        )
        # ON CONFLICT DO NOTHING: the unique indexes stop duplicates without an error;
        # the winner is then read. If it left the active states in between, nothing
        # conflicts any more: insert again.
        for _ in range(5):
            async with self._db.single() as conn:
                inserted = await self._db.jobs(conn, sql.enqueue, params)
                if inserted:
                    return inserted[0], False
                if new.request_id is not None:
                    same = await self._db.jobs(
                        conn, sql.by_request_id, {"p_request_id": new.request_id}
                    )
                    if same:
                        return same[0], True
                active = await self._db.jobs(
                    conn,
                    sql.active_for_target,
                    {"p_job_type": new.job_type.value, "p_target_id": new.target_id},
                )
                if active:
                    if on_duplicate is OnDuplicate.RETURN_EXISTING:
                        return active[0], True
                    raise DuplicateJobError(active[0].id)
        raise StorageUnavailableError("enqueue kept conflicting with jobs that changed state")

    # -- the worker's writes ----------------------------------------------------------

    async def claim(
        self,
        limit: int,
        lease_seconds: float,
        *,
        skip_types: frozenset[JobType] = frozenset(),
        only_type: JobType | None = None,
        max_per_caller: int | None = None,
    ) -> list[Claim]:
        if limit <= 0:
            return []
        types = Params.bind(**claim_type_args(skip_types, only_type))
        params = time_params(self._now(), lease_seconds) | {P_LIMIT: limit} | types
        if max_per_caller is None:
            jobs = await self._hot.claim.jobs(params)
        else:  # fair share: another statement, run only when it is set
            fair = params | {P_MAX_PER_CALLER: max_per_caller}
            jobs = await self._db.write(self._sql.claim_fair, fair)
        jobs.sort(key=lambda j: (j.created_at, j.id))
        return [Claim(job=j, token=j.claim_token or "") for j in jobs]

    async def fail_exhausted_leases(self) -> list[Job]:
        return await self._db.write(self._sql.fail_exhausted_leases, time_params(self._now()))

    async def renew_leases(
        self, leases: Sequence[tuple[str, str]], lease_seconds: float
    ) -> set[str]:
        held = self._sql.renew_rows
        owned: set[str] = set()
        for start in range(0, len(leases), MAX_BATCH):
            rows = [
                held.row(job_id=job_id, token=token)
                for job_id, token in leases[start : start + MAX_BATCH]
            ]
            params = time_params(self._now(), lease_seconds) | Rows.param(rows)
            owned.update(row["id"] for row in await self._hot.renew_leases.rows(params))
        return owned

    async def complete(
        self, job_id: str, token: str, result: JsonDict, usage: AttemptUsage | None = None
    ) -> Job:
        # Concurrent completions share one UPDATE; each row keeps its token check.
        job = await self._completes.submit((job_id, token, self._now(), result, usage))
        if job is None:
            raise LeaseLostError(job_id)
        return job

    async def _complete_batch(self, batch: list[_CompleteItem]) -> list[Job | BaseException | None]:
        done = self._sql.complete_rows
        rows = [
            done.row(at=at, job_id=job_id, token=token, result=result, usage=_usage(usage))
            for job_id, token, at, result, usage in batch
        ]
        return await self._outcome_rows(self._hot.complete_many, [b[0] for b in batch], rows)

    async def fail(
        self, job_id: str, token: str, failure: Failure, retry_at: datetime | None
    ) -> Job:
        if retry_at is not None:
            retry_at = aware(retry_at)
        job = await self._fails.submit((job_id, token, self._now(), failure, retry_at))
        if job is None:
            raise LeaseLostError(job_id)
        return job

    async def _fail_batch(self, batch: list[_FailItem]) -> list[Job | BaseException | None]:
        failed = self._sql.fail_rows
        rows = [
            failed.row(
                at=at,
                job_id=job_id,
                token=token,
                code=failure.code,
                reason=failure.reason,
                message=failure.message,
                usage=_usage(failure.usage),
                retry_at=retry_at,
            )
            for job_id, token, at, failure, retry_at in batch
        ]
        return await self._outcome_rows(self._hot.fail_many, [b[0] for b in batch], rows)

    async def release(self, job_id: str, token: str) -> Job | None:
        params = time_params(self._now()) | self._sql.release_params.bind(
            job_id=job_id, token=token
        )
        jobs = await self._db.write(self._sql.release, params)
        return jobs[0] if jobs else None

    async def _outcome_rows(
        self, statement: HotStatement, ids: list[str], rows: list[dict[str, Any]]
    ) -> list[Job | BaseException | None]:
        """An outcome statement for a batch; per row the job written, or None (the
        token no longer owns it). If the data of some row is refused, each row alone."""
        try:
            written = await _written(statement, rows)
        except StorageError as error:
            if len(rows) == 1 or not _refused_for_its_data(error):
                raise
            results: list[Job | BaseException | None] = []
            for job_id, row in zip(ids, rows, strict=True):
                try:
                    results.append((await _written(statement, [row])).get(job_id))
                except StorageError as row_error:
                    results.append(row_error)
            return results
        return [written.get(job_id) for job_id in ids]


def _usage(usage: AttemptUsage | None) -> JsonDict | None:
    """An attempt's usage as the transitions' `usage` argument: its JSON object."""
    return None if usage is None else usage.to_json()


async def _written(statement: HotStatement, rows: list[dict[str, Any]]) -> dict[str, Job]:
    """Run a batch statement whose rows carry their own time (committed on return);
    the jobs it wrote, by id."""
    return {job.id: job for job in await statement.jobs(Rows.param(rows))}


def _enqueue_args(job_id: str, new: NewJob) -> dict[str, Any]:
    """ENQUEUE's arguments for `new`."""
    return {
        "job_id": job_id,
        "job_type": new.job_type.value,
        "target_id": new.target_id,
        "request_params": new.request_params,
        "requested_by": new.requested_by,
        "request_id": new.request_id,
        "max_attempts": new.max_attempts,
        "traceparent": new.traceparent,
    }
