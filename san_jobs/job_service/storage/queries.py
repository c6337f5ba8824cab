"""The SQL of reads and operator queries: filters, pages, RetryFailed's candidates,
counts. (The job-state writes and key lookups are in statements.py.) These depend
on the caller's filter, so they are built per call."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Float,
    and_,
    case,
    cast,
    func,
    literal,
    or_,
    select,
)
from sqlalchemy.dialects.postgresql import TIMESTAMP

from san_jobs.job_service.domain.model import ACTIVE_STATUSES, JobFilter
from san_jobs.job_service.domain.transitions import ATTEMPT_USAGE_FIELD, RETRY_FAILED
from san_jobs.job_service.domain.usage import UsageQuery
from san_jobs.job_service.storage.rows import aware
from san_jobs.job_service.storage.tables import async_jobs
from san_jobs.job_service.storage.transition_sql import status_test

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
        select(t.c.id, t.c.job_type, t.c.target_id, t.c.tenant)
        .where(*status_test(s for s in RETRY_FAILED.sources if s is not None), *conds)
        .order_by(t.c.failed_at, t.c.id)
        .limit(max(0, limit))
    )
    return stmt.with_for_update(skip_locked=True) if lock else stmt


def active_for_targets(target_ids: Sequence[str]) -> Any:
    """The active jobs of these targets, of every tenant: (id, job_type, target_id,
    tenant)."""
    return select(t.c.id, t.c.job_type, t.c.target_id, t.c.tenant).where(
        *status_test(ACTIVE_STATUSES), t.c.target_id.in_(target_ids)
    )


def next_due_at() -> Any:
    """When the next active job is due (a PENDING job's time, a lease's end)."""
    return select(func.min(t.c.due_at)).where(*status_test(ACTIVE_STATUSES))


def usage_totals(query: UsageQuery, max_groups: int, postgres: bool) -> Any:
    """Usage summed by (job_type, model, requested_by) over the attempts with usage
    that ended in [start, end): one row per group, in that order, at most
    `max_groups + 1` (one more tells the answer is cut). Each job's attempts are
    unnested (`jsonb_array_elements` / `json_each`). Only jobs updated since `start`
    are read: an attempt ends when its job is updated, and updated_at only grows."""
    model: ColumnElement[Any]
    tokens_in: ColumnElement[Any]
    tokens_out: ColumnElement[Any]
    seconds: ColumnElement[Any]
    ended: ColumnElement[Any]
    if postgres:
        attempt = func.jsonb_array_elements(t.c.attempts).table_valued("value").alias("a")
        usage = attempt.c.value.op("->")(literal(ATTEMPT_USAGE_FIELD))

        def text_of(key: str) -> ColumnElement[Any]:
            return usage.op("->>")(literal(key))

        is_usage = func.jsonb_typeof(usage) == "object"
        model = text_of("model")
        tokens_in = cast(text_of("input_tokens"), BigInteger)
        tokens_out = cast(text_of("output_tokens"), BigInteger)
        seconds = cast(text_of("duration_seconds"), Float)
        cached = text_of("cached") == "true"
        ended = cast(attempt.c.value.op("->>")(literal("end_time")), TIMESTAMP(timezone=True))
        in_range = and_(ended >= aware(query.start), ended < aware(query.end))
    else:
        attempt = func.json_each(t.c.attempts).table_valued("value").alias("a")

        def field(path: str) -> ColumnElement[Any]:
            return func.json_extract(attempt.c.value, literal(f"$.{path}"))

        is_usage = func.json_type(attempt.c.value, literal(f"$.{ATTEMPT_USAGE_FIELD}")) == "object"
        model = field(f"{ATTEMPT_USAGE_FIELD}.model")
        tokens_in = field(f"{ATTEMPT_USAGE_FIELD}.input_tokens")
        tokens_out = field(f"{ATTEMPT_USAGE_FIELD}.output_tokens")
        seconds = field(f"{ATTEMPT_USAGE_FIELD}.duration_seconds")
        cached = field(f"{ATTEMPT_USAGE_FIELD}.cached") == 1
        # ISO 8601 text with its offset: compared as times, not as text.
        ended = func.julianday(field("end_time"))
        in_range = and_(
            ended >= func.julianday(literal(aware(query.start).isoformat())),
            ended < func.julianday(literal(aware(query.end).isoformat())),
        )
    terms: list[ColumnElement[bool]] = [t.c.updated_at >= aware(query.start), is_usage, in_range]
    if query.job_types:
        terms.append(t.c.job_type.in_([jt.value for jt in query.job_types]))
    if query.requested_by is not None:
        terms.append(t.c.requested_by == query.requested_by)
    model = func.coalesce(model, literal(""))
    return (
        select(
            t.c.job_type,
            model,
            t.c.requested_by,
            func.count(),
            func.sum(case((cached, 1), else_=0)),
            func.coalesce(func.sum(tokens_in), 0),
            func.coalesce(func.sum(tokens_out), 0),
            func.coalesce(func.sum(seconds), 0.0),
        )
        .select_from(t)
        .join(attempt, literal(True))
        .where(*terms)
        .group_by(t.c.job_type, model, t.c.requested_by)
        .order_by(t.c.job_type, model, t.c.requested_by)
        .limit(max_groups + 1)
    )
