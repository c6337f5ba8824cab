"""The SQL of reads and operator queries: filters, pages, RetryFailed's candidates,
counts. (The job-state writes and key lookups are in statements.py.) These depend
on the caller's filter, so they are built per call."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, func, or_, select

from job_service.domain.model import ACTIVE_STATUSES, JobFilter, JobStatus
from job_service.domain.transitions import RETRY_FAILED
from job_service.storage.rows import aware
from job_service.storage.tables import async_jobs
from job_service.storage.transition_sql import status_test

t = async_jobs


def job_filter(f: JobFilter, postgres: bool) -> list[ColumnElement[bool]]:
    """The WHERE terms of a JobFilter (AND-combined)."""
    conds: list[ColumnElement[bool]] = []
    if f.requested_by is not None:
        conds.append(t.c.requested_by == f.requested_by)
    if f.job_ids:
        conds.append(t.c.id.in_(list(f.job_ids)))
    if f.statuses:
        conds.append(t.c.status.in_([s.value for s in f.statuses]))
    if f.job_types:
        conds.append(t.c.job_type.in_([jt.value for jt in f.job_types]))
    if f.target_ids:
        conds.append(t.c.target_id.in_(list(f.target_ids)))
    if f.error_message_contains:
        needle = f.error_message_contains
        conds.append(t.c.error_message.contains(needle, autoescape=True))
        if not postgres:
            # SQLite's LIKE ignores ASCII case; PostgreSQL's does not. Be exact on both.
            conds.append(func.instr(t.c.error_message, needle) > 0)
    if f.created_after is not None:
        conds.append(t.c.created_at >= aware(f.created_after))
    if f.created_before is not None:
        conds.append(t.c.created_at < aware(f.created_before))
    if f.failed_after is not None:
        conds.append(t.c.failed_at >= aware(f.failed_after))
    if f.failed_before is not None:
        conds.append(t.c.failed_at < aware(f.failed_before))
    return conds


def page(
    conds: Sequence[ColumnElement[bool]], page_size: int, after: tuple[datetime, str] | None
) -> Any:
    """Newest first (created_at DESC, id DESC), keyset-paged from `after` (the
    (created_at, id) of the previous page's last job); one row more than the page,
    to tell whether another follows."""
    terms = list(conds)
    if after is not None:
        created, last_id = after
        terms.append(
            or_(t.c.created_at < created, and_(t.c.created_at == created, t.c.id < last_id))
        )
    return (
        select(t).where(*terms).order_by(t.c.created_at.desc(), t.c.id.desc()).limit(page_size + 1)
    )


def retry_candidates(conds: Sequence[ColumnElement[bool]], limit: int, lock: bool) -> Any:
    """Jobs RetryFailed could move (in its source statuses), oldest failure first.
    With `lock` (PostgreSQL, for real), concurrent callers split them between them
    instead of queueing on each other's row locks (or deadlocking on lock order)."""
    stmt = (
        select(t.c.id, t.c.job_type, t.c.target_id)
        .where(*status_test(s for s in RETRY_FAILED.sources if s is not None), *conds)
        .order_by(t.c.failed_at, t.c.id)
        .limit(max(0, limit))
    )
    return stmt.with_for_update(skip_locked=True) if lock else stmt


def active_for_targets(target_ids: Sequence[str]) -> Any:
    """The active jobs of these targets: (id, job_type, target_id)."""
    return select(t.c.id, t.c.job_type, t.c.target_id).where(
        *status_test(ACTIVE_STATUSES), t.c.target_id.in_(target_ids)
    )


def counts_by_type_and_status() -> Any:
    return select(t.c.job_type, t.c.status, func.count()).group_by(t.c.job_type, t.c.status)


def oldest_pending_created_at() -> Any:
    return select(func.min(t.c.created_at)).where(*status_test([JobStatus.PENDING]))


def next_due_at() -> Any:
    """When the next active job is due (a PENDING job's time, a lease's end)."""
    return select(func.min(t.c.due_at)).where(*status_test(ACTIVE_STATUSES))
