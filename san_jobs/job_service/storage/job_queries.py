"""SqlJobQueries: the job queries' port (domain/ports.JobQueries) on `async_jobs`.

What callers read about jobs, in one place: one job, many, a page (keyset-paged),
what a waiting job waits on and which dependents an end moved, a tenant's pending
count, the stats (kept by triggers: counts.py) and their folding, the usage totals
and the failure groups. Each is one read on an autocommit connection (fold_counts a
short write); reads' SQL is in queries.py, counts.py and failure_groups.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime

from sqlalchemy import and_, func, literal, or_, select

from san_jobs.job_service.domain.errors import (
    JobNotFoundError,
)
from san_jobs.job_service.domain.failure_groups import (
    FailureGroup,
)
from san_jobs.job_service.domain.model import (
    Job,
    JobCount,
    JobStats,
    JobStatus,
    JobType,
)
from san_jobs.job_service.domain.page_token import decode_page_token, encode_page_token
from san_jobs.job_service.domain.ports import (
    FailureGroupsParams,
    ListJobsParams,
    PendingCountParams,
    UsageTotalsParams,
)
from san_jobs.job_service.domain.usage import UsageTotal, group_key
from san_jobs.job_service.storage import counts, queries
from san_jobs.job_service.storage.connections import Connections
from san_jobs.job_service.storage.failure_groups import failure_groups_query, groups_of
from san_jobs.job_service.storage.rows import as_utc, chunks
from san_jobs.job_service.storage.statements import Statements
from san_jobs.job_service.storage.tables import async_jobs, job_dependencies

_jobs = async_jobs.c
_deps = job_dependencies.c


class SqlJobQueries:
    """The job queries on SQLite or PostgreSQL: the store's connections, statements and
    clock (the stats' due times are the clock's)."""

    def __init__(self, *, db: Connections, sql: Statements, now: Callable[[], datetime]) -> None:
        self._db = db
        self._sql = sql
        self._now = now

    async def get(self, job_id: str) -> Job:
        async with self._db.single() as conn:
            jobs = await self._db.jobs(conn, self._sql.by_id, {"p_id": job_id})
        if not jobs:
            raise JobNotFoundError(job_id)
        return jobs[0]

    async def get_many(self, job_ids: Sequence[str]) -> list[Job]:
        unique_ids = list(dict.fromkeys(job_ids))
        found: dict[str, Job] = {}
        async with self._db.single() as conn:
            for chunk in chunks(unique_ids):
                for job in await self._db.jobs(conn, self._sql.by_ids, {"p_ids": list(chunk)}):
                    found[job.id] = job
        return [found[i] for i in unique_ids if i in found]

    async def pending_count(self, params: PendingCountParams) -> int:
        # Counted through ix_async_jobs_pending_created_at (PENDING rows only) and
        # stopped at `at_most`: the quota asks every few seconds per active tenant.
        mine = (
            select(literal(1))
            .select_from(async_jobs)
            .where(and_(async_jobs.c.status == "PENDING", async_jobs.c.tenant == params.tenant))
            .limit(params.at_most)
            .subquery()
        )
        async with self._db.single() as conn:
            return int((await conn.execute(select(func.count()).select_from(mine))).scalar_one())

    async def list_jobs(self, params: ListJobsParams) -> tuple[list[Job], str | None]:
        page_size = max(1, params.page_size)
        after = decode_page_token(params.page_token) if params.page_token else None
        stmt = queries.page(queries.job_filter(params.job_filter, self._db.pg), page_size, after)
        async with self._db.single() as conn:
            jobs = await self._db.jobs(conn, stmt, {})
        if len(jobs) <= page_size:
            return jobs, None
        jobs = jobs[:page_size]
        return jobs, encode_page_token(jobs[-1].created_at, jobs[-1].id)

    async def with_waiting_on(self, jobs: Sequence[Job]) -> list[Job]:
        """`jobs` with `waiting_on` filled in for those waiting for dependencies: one
        query for all of them (none when no job waits)."""
        waiting = [job.id for job in jobs if job.waits_for_dependencies]
        if not waiting:
            return list(jobs)
        open_ones: dict[str, list[tuple[int, str]]] = {}
        async with self._db.single() as conn:
            for chunk in chunks(waiting):
                rows = await conn.execute(
                    select(_deps.job_id, _deps.depends_on_id, _deps.position)
                    .join(async_jobs, _jobs.id == _deps.depends_on_id)
                    .where(and_(_deps.job_id.in_(list(chunk)), _jobs.status != "COMPLETED"))
                )
                for job_id, dependency_id, position in rows:
                    open_ones.setdefault(job_id, []).append((position, dependency_id))
        return [
            replace(job, waiting_on=tuple(d for _, d in sorted(open_ones[job.id])))
            if job.id in open_ones
            else job
            for job in jobs
        ]

    async def dependents_moved_by(self, job_ids: Sequence[str]) -> list[str]:
        """The dependents that the end of `job_ids` moved, in the statement that ended
        them (the trigger writes the ended job's updated_at into each): now due, or
        CANCELLED. Not those it only counted down (still waiting for others): with
        100 jobs ending that 1,000 others all wait for, each end loaded all 1,000."""
        dependent, ended = async_jobs.alias("dependent"), async_jobs.alias("ended")
        found: list[str] = []
        async with self._db.single() as conn:
            for chunk in chunks(list(job_ids)):
                rows = await conn.execute(
                    select(_deps.job_id)
                    .join(dependent, dependent.c.id == _deps.job_id)
                    .join(ended, ended.c.id == _deps.depends_on_id)
                    .where(
                        and_(
                            _deps.depends_on_id.in_(list(chunk)),
                            dependent.c.updated_at == ended.c.updated_at,
                            or_(
                                dependent.c.status != JobStatus.PENDING.value,
                                dependent.c.dependencies_left == 0,
                            ),
                        )
                    )
                    .distinct()
                )
                found += [row[0] for row in rows]
        return found

    async def stats(self) -> JobStats:
        """One statement, whatever the table's size (storage/counts.py)."""
        async with self._db.single() as conn:
            rows = (await conn.execute(counts.stats_statement(), {"now": self._now()})).all()
        found = tuple(
            sorted(
                (JobCount(JobType(r.job_type), JobStatus(r.status), int(r.n)) for r in rows),
                key=lambda c: (c.job_type.value, c.status.value),
            )
        )
        return JobStats(
            counts=found,
            oldest_pending_created_at=as_utc(rows[0].oldest_pending) if rows else None,
            oldest_due_by_type={
                JobType(r.job_type): at for r in rows if (at := as_utc(r.oldest_due)) is not None
            },
        )

    async def fold_counts(self) -> int:
        """Move the count deltas into the totals (PostgreSQL; SQLite keeps none).
        Returns how many delta rows were folded."""
        if not self._db.pg:
            return 0
        async with self._db.tx() as conn:
            return int((await conn.execute(counts.fold_statement())).scalar_one())

    async def usage_totals(self, params: UsageTotalsParams) -> tuple[list[UsageTotal], bool]:
        max_groups = params.max_groups
        statement = queries.usage_totals(params.query, max_groups, self._db.pg)
        async with self._db.single() as conn:
            rows = (await conn.execute(statement)).all()
        # Sorted here too: the databases' collations may order the words otherwise.
        totals = sorted(
            (
                UsageTotal(
                    job_type=JobType(row[0]),
                    model=str(row[1]),
                    requested_by=str(row[2]),
                    attempts=int(row[3]),
                    cached_attempts=int(row[4] or 0),
                    input_tokens=int(row[5] or 0),
                    output_tokens=int(row[6] or 0),
                    duration_seconds=float(row[7] or 0.0),
                )
                for row in rows
            ),
            key=group_key,
        )
        return totals[:max_groups], len(totals) > max_groups

    async def failure_groups(self, params: FailureGroupsParams) -> tuple[list[FailureGroup], bool]:
        """The groups of the query in :func:`group_order`, at most ``max_groups``, and
        whether more were left out."""
        max_groups = params.max_groups
        async with self._db.single() as conn:
            statement = failure_groups_query(params.query, max_groups)
            rows = (await conn.execute(statement)).all()
        return groups_of(rows, max_groups)
