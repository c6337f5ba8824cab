"""SqlWorkerStore: the worker's port (domain/ports.WorkerStore) on `async_jobs`.

Everything the worker's parts write or read, in one place: the claim (with or without
a type's limits, and the merge of a dependent's inputs at its first claim), lease
renewal, completion, failure, release, the expired leases' end, the last-resort end
of an outcome that could not be written, and when the next job is due.

Every write is one atomic `UPDATE ... RETURNING` statement, run without BEGIN/COMMIT
round trips (connections.py), except the claim of a limited type and the last-resort
end, which take a transaction. Concurrent completions and failures are coalesced
(batching.py): the calls waiting at the same time share ONE statement over a JSON
array of rows, and each caller returns only after that statement committed, with its
own row's outcome.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import and_, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from san_jobs.job_service.domain.claim_limits import (
    LimitedClaim,
    TypeLimit,
    allowance,
    refilled,
    wait_after,
)
from san_jobs.job_service.domain.dependencies import (
    TAKES_RESULTS,
    Finished,
    failure_message,
    merged_input,
)
from san_jobs.job_service.domain.errors import (
    LeaseLostError,
    StorageError,
    StorageUnavailableError,
)
from san_jobs.job_service.domain.model import (
    AttemptUsage,
    Claim,
    Failure,
    Job,
    JobStatus,
    JobType,
    JsonDict,
)
from san_jobs.job_service.domain.ports import (
    ClaimParams,
    CompleteParams,
    FailParams,
    LimitedClaimParams,
    ReleaseParams,
    RenewLeasesParams,
)
from san_jobs.job_service.domain.priorities import AgeShare
from san_jobs.job_service.domain.transitions import claim_type_args
from san_jobs.job_service.storage import queries
from san_jobs.job_service.storage.batching import MAX_BATCH, GroupCommit, refused_for_its_data
from san_jobs.job_service.storage.connections import Connections, HotStatement, HotStatements
from san_jobs.job_service.storage.dependencies import ended_by
from san_jobs.job_service.storage.outcome_rows import check_claimed, outcome_job
from san_jobs.job_service.storage.rows import as_utc, aware, chunks
from san_jobs.job_service.storage.statements import (
    HOT_SESSION,
    P_LIMIT,
    P_MAX_PER_CALLER,
    Statements,
)
from san_jobs.job_service.storage.tables import async_jobs, job_dependencies
from san_jobs.job_service.storage.transition_sql import Params, Rows, time_params

_jobs = async_jobs.c
_deps = job_dependencies.c

# fail(): job id, claim token, time of the call, failure, retry_at, the claimed job.
_FailItem = tuple[str, str, datetime, Failure, datetime | None, Job | None]
# complete(): job id, claim token, time of the call, result, usage, the claimed job.
_CompleteItem = tuple[str, str, datetime, JsonDict, AttemptUsage | None, Job | None]


class SqlWorkerStore:
    """The worker's port on SQLite or PostgreSQL: the store's connections and
    statements, its clock, and `read_many` (the queries' get_many) for the claimed
    jobs' columns a caller did not give."""

    def __init__(
        self,
        *,
        db: Connections,
        sql: Statements,
        hot: HotStatements,
        now: Callable[[], datetime],
        read_many: Callable[[Sequence[str]], Awaitable[list[Job]]],
    ) -> None:
        self._db = db
        self._sql = sql
        self._hot = hot
        self._now = now
        self._read_many = read_many
        # Which order the next claim takes, over every claim of this store
        # (domain/priorities.py).
        self._age_share = AgeShare()
        # Group commit of the outcomes: concurrent calls share one statement.
        self._completes: GroupCommit[_CompleteItem, Job | None] = GroupCommit(
            self._complete_batch, max_batch=MAX_BATCH, name="complete", key=lambda i: i[0]
        )
        self._fails: GroupCommit[_FailItem, Job | None] = GroupCommit(
            self._fail_batch, max_batch=MAX_BATCH, name="fail", key=lambda i: i[0]
        )

    async def wait_idle(self) -> None:
        """Return once no outcome waits for its statement (before the store closes)."""
        for coalescer in (self._completes, self._fails):
            await coalescer.wait_idle()

    # -- the claim ----------------------------------------------------------------------

    async def claim(self, params: ClaimParams) -> list[Claim]:
        if params.limit <= 0:
            return []
        types = Params.bind(**claim_type_args(params.skip_types, params.only_type))
        bound = time_params(self._now(), params.lease_seconds) | {P_LIMIT: params.limit} | types
        # By age or by priority: the anti-starvation share (domain/priorities.py).
        by_age = self._age_share.next_by_age()
        if params.max_per_caller is None:
            hot = self._hot.claim if by_age else self._hot.claim_urgent
            jobs = await hot.jobs(bound)
        else:  # fair share: another statement, run only when it is set
            fair = bound | {P_MAX_PER_CALLER: params.max_per_caller}
            statement = self._sql.claim_fair if by_age else self._sql.claim_fair_urgent
            jobs = await self._db.write(statement, fair)
        self._age_share.took(len(jobs), by_age)
        jobs.sort(key=lambda j: (j.created_at, j.id))
        # A job that takes its dependencies' results gets them now.
        return await self._merge_inputs([Claim(job=j, token=j.claim_token or "") for j in jobs])

    async def claim_limited(self, params: LimitedClaimParams) -> LimitedClaim:
        """One transaction per claim: lock the type's bucket row (PostgreSQL; SQLite
        has one instance and one writer), count the type's running jobs, claim what the
        limits allow with the ordinary claim statement (only_type), and put back the
        tokens not used. The lock makes instances claiming the same limited type take
        turns, so neither the tokens nor the running count can be spent twice.
        Unlimited types never come here."""
        if params.limit <= 0:
            return LimitedClaim()
        type_limit = params.type_limit
        key = {"p_job_type": str(params.job_type)}
        async with self._db.tx() as conn:
            if self._db.pg:
                # The claim's plan, as on the hot connection (statements.HOT_SESSION).
                for setting in HOT_SESSION:
                    await conn.execute(text(setting.replace("SET ", "SET LOCAL ", 1)))
            tokens, now = await self._bucket_tokens(conn, key, type_limit)
            running = 0
            started_at = now
            if type_limit.max_running is not None:
                count = await conn.execute(self._sql.running_of_type, key)
                running = int(count.scalar_one())
                # The claim's attempts start after the count that found their slots
                # free: a completion that committed just before it ended before they
                # start, so the attempts' records never show more running at once
                # than the limit (dated at `now`, they could, by a whole batch).
                started_at = self._now()
            allowed = allowance(params.limit, type_limit, tokens, running)
            claims = await self._claim_of_type(conn, params, allowed.jobs, started_at)
            tokens_left = None
            if tokens is not None:
                tokens_left = tokens - len(claims)
                spent = key | {"p_tokens": tokens_left, "p_now": now}
                await conn.execute(self._sql.spend_tokens, spent)
        # After the transaction (on SQLite it holds the one write lock): a job that
        # takes its dependencies' results gets them.
        claims = await self._merge_inputs(claims)
        return LimitedClaim(claims, wait_after(len(claims), allowed, tokens_left, type_limit))

    async def _bucket_tokens(
        self, conn: AsyncConnection, key: dict[str, str], type_limit: TypeLimit
    ) -> tuple[float | None, datetime]:
        """Lock the type's bucket row (made on first use; a type with a concurrency
        limit alone has one too, for the lock); its tokens now (None without a rate
        limit), and the time of the claim: read once the lock is held, so that an
        instance that waited for it neither refills the bucket for time already
        counted nor dates its starts early."""
        row = (await conn.execute(self._sql.bucket, key)).first()
        if row is None:
            # Two instances may race here: the insert does nothing for the second,
            # whose select then waits on the lock.
            full = type_limit.burst if type_limit.per_second is not None else 0.0
            params = key | {"p_tokens": full, "p_now": self._now()}
            await conn.execute(self._sql.new_bucket, params)
            row = (await conn.execute(self._sql.bucket, key)).one()
        now = self._now()
        if type_limit.per_second is None:
            return None, now
        refilled_at = as_utc(row.refilled_at)
        assert refilled_at is not None  # NOT NULL
        return refilled(float(row.tokens), refilled_at, now, type_limit), now

    async def _claim_of_type(
        self, conn: AsyncConnection, params: LimitedClaimParams, jobs: int, now: datetime
    ) -> list[Claim]:
        if jobs <= 0:
            return []
        types = Params.bind(**claim_type_args((), params.job_type))
        bound = time_params(now, params.lease_seconds) | {P_LIMIT: jobs} | types
        # By age or by priority: the anti-starvation share (domain/priorities.py).
        by_age = self._age_share.next_by_age()
        statement = self._sql.claim if by_age else self._sql.claim_urgent
        if params.max_per_caller is not None:  # fair share (Statements._fair_claim)
            statement = self._sql.claim_fair if by_age else self._sql.claim_fair_urgent
            bound |= {P_MAX_PER_CALLER: params.max_per_caller}
        claimed = await self._db.jobs(conn, statement, bound)
        self._age_share.took(len(claimed), by_age)
        claimed.sort(key=lambda j: (j.created_at, j.id))
        return [Claim(job=j, token=j.claim_token or "") for j in claimed]

    async def _merge_inputs(self, claims: list[Claim]) -> list[Claim]:
        """Claims of jobs that take their dependencies' results and have not had them
        yet get them now (domain/dependencies.py): the merged input is written as the
        job's input (while the claim still owns it), so every later attempt sends the
        same."""
        out: list[Claim] = []
        for claim in claims:
            job = claim.job
            if job.depends_on and job.inputs_merged_at is None and job.job_type in TAKES_RESULTS:
                claim = await self._merge_one(claim)
            out.append(claim)
        return out

    async def _merge_one(self, claim: Claim) -> Claim:
        job, now = claim.job, self._now()
        async with self._db.single() as conn:
            rows = await conn.execute(
                select(
                    _jobs.id, _jobs.job_type, _jobs.completed_at, _jobs.result, _jobs.request_params
                ).where(and_(_jobs.id.in_(list(job.depends_on)), _jobs.status == "COMPLETED"))
            )
            finished = [
                Finished(
                    job_id=row.id,
                    job_type=JobType(row.job_type),
                    completed_at=row.completed_at,
                    result=row.result or {},
                    input=row.request_params or {},
                )
                for row in rows
            ]
            params = merged_input(job.job_type, job.request_params, finished)
            await conn.execute(
                update(async_jobs)
                .where(and_(_jobs.id == job.id, _jobs.claim_token == claim.token))
                .values(request_params=params, inputs_merged_at=now)
            )
        return Claim(
            job=replace(job, request_params=params, inputs_merged_at=now), token=claim.token
        )

    # -- leases -------------------------------------------------------------------------

    async def fail_exhausted_leases(self) -> list[Job]:
        return await self._db.write(self._sql.fail_exhausted_leases, time_params(self._now()))

    async def renew_leases(self, params: RenewLeasesParams) -> set[str]:
        leases, lease_seconds = params.leases, params.lease_seconds
        held = self._sql.renew_rows
        owned: set[str] = set()
        for start in range(0, len(leases), MAX_BATCH):
            rows = [
                held.row(job_id=job_id, token=token)
                for job_id, token in leases[start : start + MAX_BATCH]
            ]
            bound = time_params(self._now(), lease_seconds) | Rows.param(rows)
            owned.update(row["id"] for row in await self._hot.renew_leases.rows(bound))
        return owned

    async def next_due_at(self) -> datetime | None:
        async with self._db.single() as conn:
            value = (await conn.execute(queries.next_due_at())).scalar_one_or_none()
        return as_utc(value)

    # -- outcomes -----------------------------------------------------------------------

    async def complete(self, params: CompleteParams) -> Job:
        check_claimed(params.job_id, params.claimed)
        # Concurrent completions share one UPDATE; each row keeps its token check.
        item = (
            params.job_id,
            params.token,
            self._now(),
            params.result,
            params.usage,
            params.claimed,
        )
        job = await self._completes.submit(item)
        if job is None:
            raise LeaseLostError(params.job_id)
        return job

    async def _complete_batch(self, batch: list[_CompleteItem]) -> list[Job | BaseException | None]:
        done = self._sql.complete_rows
        rows = [
            done.row(at=at, job_id=job_id, token=token, result=result, usage=_usage(usage))
            for job_id, token, at, result, usage, _ in batch
        ]
        claims = [(b[0], b[5]) for b in batch]
        return await self._outcome_rows(self._hot.complete_many, claims, rows)

    async def fail(self, params: FailParams) -> Job:
        check_claimed(params.job_id, params.claimed)
        retry_at = aware(params.retry_at) if params.retry_at is not None else None
        item = (params.job_id, params.token, self._now(), params.failure, retry_at, params.claimed)
        job = await self._fails.submit(item)
        if job is None:
            raise LeaseLostError(params.job_id)
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
            for job_id, token, at, failure, retry_at, _ in batch
        ]
        claims = [(b[0], b[5]) for b in batch]
        return await self._outcome_rows(self._hot.fail_many, claims, rows)

    async def release(self, params: ReleaseParams) -> Job | None:
        bound = time_params(self._now()) | self._sql.release_params.bind(
            job_id=params.job_id, token=params.token
        )
        jobs = await self._db.write(self._sql.release, bound)
        return jobs[0] if jobs else None

    async def _outcome_rows(
        self,
        statement: HotStatement,
        claims: list[tuple[str, Job | None]],
        rows: list[dict[str, Any]],
    ) -> list[Job | BaseException | None]:
        """An outcome statement for a batch of (job id, the job as claimed or None);
        per row the job written, or None (the token no longer owns it). If the data of
        some row is refused, each row alone."""
        kept = await self._kept_columns(claims)
        ids = [job_id for job_id, _ in claims]
        try:
            written = await _written(statement, rows)
        except StorageError as error:
            if len(rows) == 1 or not refused_for_its_data(error):
                raise
            results: list[Job | BaseException | None] = []
            for job_id, row in zip(ids, rows, strict=True):
                try:
                    alone = (await _written(statement, [row])).get(job_id)
                    results.append(_joined(alone, kept))
                except StorageError as row_error:
                    results.append(row_error)
            return results
        return [_joined(written.get(job_id), kept) for job_id in ids]

    async def _kept_columns(self, claims: list[tuple[str, Job | None]]) -> dict[str, Job]:
        """By id, a job to take the columns the outcome statement leaves out from
        (outcome_rows.py): the claimed job the caller gave, else the job read now
        (those columns never change, so before or after the write is the same)."""
        kept = {job_id: job for job_id, job in claims if job is not None}
        unknown = [job_id for job_id, job in claims if job is None]
        if unknown:
            kept.update((job.id, job) for job in await self._read_many(unknown))
        return kept

    # -- an end the trigger could not write --------------------------------------------

    async def end_unsettled(self, params: FailParams) -> list[Job]:
        """FAILED with `params.failure`, written without the trigger of 0017: its
        has_dependents is cleared first (an UPDATE not of status fires nothing), the
        failure written by the same statement as any failed attempt's, then its waiting
        dependents, and theirs, CANCELLED one level per statement (`_end_dependents`),
        all in one transaction. For a job whose outcome could not be written (a chain
        deeper than the trigger's recursion allows, stored before the depth bound; any
        other refusal): the job ends, visibly, instead of being claimed again forever.
        The job first, then the dependents ended; LeaseLostError if `params.token` no
        longer owns it."""
        now, job_id = self._now(), params.job_id
        failure = params.failure
        async with self._db.tx() as conn:
            owned = (
                await conn.execute(
                    select(_jobs.has_dependents).where(
                        and_(_jobs.id == job_id, _jobs.claim_token == params.token)
                    )
                )
            ).first()
            if owned is None:
                raise LeaseLostError(job_id)
            await conn.execute(
                update(async_jobs).where(_jobs.id == job_id).values(has_dependents=False)
            )
            row = self._sql.fail_rows.row(
                at=now,
                job_id=job_id,
                token=params.token,
                code=failure.code,
                reason=failure.reason,
                message=failure.message,
                usage=_usage(failure.usage),
                retry_at=None,
            )
            await conn.execute(self._sql.fail_many, Rows.param([row]))
            ended = await self._end_dependents(conn, job_id, now) if owned[0] else []
            by_id: dict[str, Job] = {}
            for chunk in chunks([job_id, *ended]):
                jobs = await self._db.jobs(conn, self._sql.by_ids, {"p_ids": list(chunk)})
                by_id.update((job.id, job) for job in jobs)
        return [by_id[i] for i in (job_id, *ended) if i in by_id]

    async def _end_dependents(
        self, conn: AsyncConnection, root_id: str, now: datetime
    ) -> list[str]:
        """Cancel the waiting dependents of `root_id` (FAILED), and theirs, as the
        trigger would ("Dependency <id> FAILED|CANCELLED", each naming the job it
        waited for), one level per round and without recursion: each is written with
        has_dependents cleared, so the trigger does not fire for it. Their ids."""
        ended: list[str] = []
        frontier = {root_id: JobStatus.FAILED}
        while frontier:
            parent_of: dict[str, str] = {}
            for chunk in chunks(list(frontier)):
                rows = await conn.execute(
                    select(_deps.job_id, _deps.depends_on_id)
                    .join(async_jobs, _jobs.id == _deps.job_id)
                    .where(
                        and_(
                            _deps.depends_on_id.in_(list(chunk)),
                            _jobs.status == JobStatus.PENDING.value,
                            _jobs.dependencies_left > 0,
                        )
                    )
                )
                for dependent_id, dependency_id in rows:
                    parent_of.setdefault(dependent_id, dependency_id)
            by_parent: dict[str, list[str]] = {}
            for dependent_id, dependency_id in parent_of.items():
                by_parent.setdefault(dependency_id, []).append(dependent_id)
            for dependency_id, dependents in by_parent.items():
                message = failure_message(dependency_id, frontier[dependency_id])
                for chunk in chunks(dependents):
                    await conn.execute(
                        update(async_jobs)
                        .where(and_(_jobs.id.in_(list(chunk)), _jobs.status == "PENDING"))
                        .values(has_dependents=False, **ended_by(message, now))
                    )
            ended += parent_of
            frontier = dict.fromkeys(parent_of, JobStatus.CANCELLED)
        return ended


def _usage(usage: AttemptUsage | None) -> JsonDict | None:
    """An attempt's usage as the transitions' `usage` argument: its JSON object."""
    return None if usage is None else usage.to_json()


async def _written(statement: HotStatement, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Run an outcome statement whose rows carry their own time (committed on return);
    the rows it wrote (outcome_rows.OUTCOME_COLUMNS), by id."""
    return {row["id"]: row for row in await statement.rows(Rows.param(rows))}


def _joined(row: Any, kept: dict[str, Job]) -> Job | BaseException | None:
    """The job an outcome row wrote, whole (None: no row, the token lost the job)."""
    if row is None:
        return None
    job = kept.get(row["id"])
    if job is None:  # only if the row was deleted between the read and the write
        return StorageUnavailableError(f"job {row['id']} vanished while its outcome was written")
    return outcome_job(row, job)
