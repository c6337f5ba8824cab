"""MemoryJobQueries: the job queries' port (domain/ports.JobQueries) on a MemoryTable, as
job_queries.py is on the databases: the same picks, orders and pages, and stats
counted from the rows each time (the table is small)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from datetime import datetime

from san_jobs.job_service.domain.errors import (
    JobNotFoundError,
)
from san_jobs.job_service.domain.failure_groups import (
    FailureGroup,
    group_order,
    message_prefix,
)
from san_jobs.job_service.domain.model import (
    AttemptUsage,
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
from san_jobs.job_service.storage.apply_transition import (
    Row,
    status_of,
)
from san_jobs.job_service.storage.memory_rows import (
    MemoryRows,
    job_of,
    matches,
)
from san_jobs.job_service.storage.rows import aware


class MemoryJobQueries(MemoryRows):
    async def get(self, job_id: str) -> Job:
        await asyncio.sleep(0)
        row = self._rows.get(job_id)
        if row is None:
            raise JobNotFoundError(job_id)
        return job_of(row)

    async def get_many(self, job_ids: Sequence[str]) -> list[Job]:
        await asyncio.sleep(0)
        return [job_of(self._rows[i]) for i in dict.fromkeys(job_ids) if i in self._rows]

    async def pending_count(self, params: PendingCountParams) -> int:
        await asyncio.sleep(0)
        pending = sum(
            1
            for row in self._rows.values()
            if row["status"] == "PENDING" and row["tenant"] == params.tenant
        )
        return min(pending, params.at_most)

    async def with_waiting_on(self, jobs: Sequence[Job]) -> list[Job]:
        return list(jobs)  # no job here has dependencies (_enqueue_now)

    async def dependents_moved_by(self, job_ids: Sequence[str]) -> list[str]:
        return []

    async def list_jobs(self, params: ListJobsParams) -> tuple[list[Job], str | None]:
        await asyncio.sleep(0)
        job_filter, page_size, page_token = params.job_filter, params.page_size, params.page_token
        page_size = max(1, page_size)
        after = decode_page_token(page_token) if page_token else None
        rows = sorted(
            (
                row
                for row in self._rows.values()
                if matches(row, job_filter)
                and (after is None or (row["created_at"], row["id"]) < after)
            ),
            key=lambda row: (row["created_at"], row["id"]),
            reverse=True,
        )
        jobs = [job_of(row) for row in rows[: page_size + 1]]
        if len(jobs) <= page_size:
            return jobs, None
        jobs = jobs[:page_size]
        return jobs, encode_page_token(jobs[-1].created_at, jobs[-1].id)

    async def usage_totals(self, params: UsageTotalsParams) -> tuple[list[UsageTotal], bool]:
        await asyncio.sleep(0)
        query, max_groups = params.query, params.max_groups
        groups: dict[tuple[JobType, str, str], list[AttemptUsage]] = {}
        for row in self._rows.values():
            for attempt in row["attempts"]:
                if attempt.usage is not None and query.counts(
                    row["job_type"], row["requested_by"], attempt
                ):
                    key = (row["job_type"], attempt.usage.model, row["requested_by"])
                    groups.setdefault(key, []).append(attempt.usage)
        totals = sorted(
            (
                UsageTotal(
                    job_type=job_type,
                    model=model,
                    requested_by=requested_by,
                    attempts=len(used),
                    cached_attempts=sum(u.cached for u in used),
                    input_tokens=sum(u.input_tokens for u in used),
                    output_tokens=sum(u.output_tokens for u in used),
                    duration_seconds=sum(u.duration_seconds for u in used),
                )
                for (job_type, model, requested_by), used in groups.items()
            ),
            key=group_key,
        )
        return totals[:max_groups], len(totals) > max_groups

    async def failure_groups(self, params: FailureGroupsParams) -> tuple[list[FailureGroup], bool]:
        await asyncio.sleep(0)
        query, max_groups = params.query, params.max_groups
        selection = query.job_filter()
        members: dict[tuple[str, str, str], list[Row]] = {}
        for row in self._rows.values():
            if matches(row, selection):
                key = (
                    row["error_code"] or "",
                    row["error_reason"] or "",
                    message_prefix(row["error_message"]),
                )
                members.setdefault(key, []).append(row)
        groups = sorted(
            (
                FailureGroup(
                    error_code=code,
                    error_reason=reason,
                    message_prefix=prefix,
                    count=len(rows),
                    latest_failed_at=max(row["failed_at"] for row in rows),
                    example_job_id=max(row["id"] for row in rows),
                )
                for (code, reason, prefix), rows in members.items()
            ),
            key=group_order,
        )
        return groups[:max_groups], len(groups) > max_groups

    async def stats(self) -> JobStats:
        await asyncio.sleep(0)
        counts = Counter((row["job_type"], status_of(row)) for row in self._rows.values())
        oldest = min(
            (
                row["created_at"]
                for row in self._rows.values()
                if status_of(row) is JobStatus.PENDING
            ),
            default=None,
        )
        return JobStats(
            counts=tuple(
                sorted(
                    (JobCount(job_type, status, n) for (job_type, status), n in counts.items()),
                    key=lambda c: (str(c.job_type), str(c.status)),
                )
            ),
            oldest_pending_created_at=oldest,
            oldest_due_by_type=self._oldest_due_by_type(),
        )

    async def fold_counts(self) -> int:
        await asyncio.sleep(0)
        return 0  # counted from the rows each time (the table is small)

    def _oldest_due_by_type(self) -> dict[JobType, datetime]:
        now = aware(self._clock())
        due: dict[JobType, datetime] = {}
        for row in self._rows.values():
            at = row["due_at"]
            if status_of(row) is JobStatus.PENDING and at is not None and at <= now:
                job_type = row["job_type"]
                due[job_type] = min(at, due.get(job_type, at))
        return due
