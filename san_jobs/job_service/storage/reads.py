"""Reads: one job, many jobs, a page of jobs."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import and_, func, literal, select

from san_jobs.job_service.domain.errors import JobNotFoundError
from san_jobs.job_service.domain.model import Job
from san_jobs.job_service.domain.page_token import decode_page_token, encode_page_token
from san_jobs.job_service.domain.ports import ListJobsParams
from san_jobs.job_service.storage import queries
from san_jobs.job_service.storage.connections import StoreParts
from san_jobs.job_service.storage.rows import chunks
from san_jobs.job_service.storage.tables import async_jobs


class JobReads(StoreParts):
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

    async def pending_count(self, tenant: str, at_most: int) -> int:
        # Counted through ix_async_jobs_pending_created_at (PENDING rows only) and
        # stopped at `at_most`: the quota asks every few seconds per active tenant.
        mine = (
            select(literal(1))
            .select_from(async_jobs)
            .where(and_(async_jobs.c.status == "PENDING", async_jobs.c.tenant == tenant))
            .limit(at_most)
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
