"""Reads: one job, many jobs, a page of jobs."""

from __future__ import annotations

from collections.abc import Sequence

from san_jobs.job_service.domain.errors import JobNotFoundError
from san_jobs.job_service.domain.model import Job, JobFilter
from san_jobs.job_service.domain.page_token import decode_page_token, encode_page_token
from san_jobs.job_service.storage import queries
from san_jobs.job_service.storage.connections import Connections
from san_jobs.job_service.storage.rows import chunks
from san_jobs.job_service.storage.statements import Statements


class JobReads:
    def __init__(self, connections: Connections, sql: Statements) -> None:
        self._db = connections
        self._sql = sql

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

    async def list_jobs(
        self, job_filter: JobFilter, page_size: int, page_token: str | None
    ) -> tuple[list[Job], str | None]:
        page_size = max(1, page_size)
        after = decode_page_token(page_token) if page_token else None
        stmt = queries.page(queries.job_filter(job_filter, self._db.pg), page_size, after)
        async with self._db.single() as conn:
            jobs = await self._db.jobs(conn, stmt, {})
        if len(jobs) <= page_size:
            return jobs, None
        jobs = jobs[:page_size]
        return jobs, encode_page_token(jobs[-1].created_at, jobs[-1].id)
