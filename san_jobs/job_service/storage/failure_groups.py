"""ListFailureGroups on SQL: one GROUP BY over the FAILED jobs of a bounded time range.

The WHERE repeats the partial indexes' own predicate (``status = 'FAILED'`` as literal
SQL, :func:`transition_sql.status_test`): SQLite uses a partial index only then, and
PostgreSQL cannot match a bound parameter against it in a generic plan. So the rows
read are those of the range alone, found through the index on failed jobs by time
(``ix_async_jobs_failed_at``; migration 0009 adds one by (job_type, failed_at)).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, literal, select

from san_jobs.job_service.domain.failure_groups import (
    MESSAGE_PREFIX_CHARS,
    FailureGroup,
    FailureQuery,
    group_order,
)
from san_jobs.job_service.domain.model import JobStatus
from san_jobs.job_service.storage.rows import as_utc, aware
from san_jobs.job_service.storage.tables import async_jobs
from san_jobs.job_service.storage.transition_sql import Term, status_test

t = async_jobs


def failure_groups_query(query: FailureQuery, max_groups: int) -> Any:
    """One row per (error_code, error_reason, message prefix): count, latest failed_at,
    greatest id; largest first, at most ``max_groups + 1`` (one more tells the answer
    is cut)."""
    code = func.coalesce(t.c.error_code, literal(""))
    reason = func.coalesce(t.c.error_reason, literal(""))
    prefix = func.substr(func.coalesce(t.c.error_message, literal("")), 1, MESSAGE_PREFIX_CHARS)
    terms: list[Term] = [
        *status_test([JobStatus.FAILED]),
        t.c.failed_at >= aware(query.failed_after),
        t.c.failed_at < aware(query.failed_before),
    ]
    if query.job_types:
        terms.append(t.c.job_type.in_([jt.value for jt in query.job_types]))
    count = func.count()
    latest = func.max(t.c.failed_at)
    return (
        select(code, reason, prefix, count, latest, func.max(t.c.id))
        .where(*terms)
        .group_by(code, reason, prefix)
        .order_by(count.desc(), latest.desc())
        .limit(max_groups + 1)
    )


def groups_of(rows: Any, max_groups: int) -> tuple[list[FailureGroup], bool]:
    groups: list[FailureGroup] = []
    for code, reason, prefix, count, latest, example in rows:
        failed_at = as_utc(latest)
        assert failed_at is not None  # a group has at least one FAILED job, with failed_at
        groups.append(
            FailureGroup(
                error_code=str(code),
                error_reason=str(reason),
                message_prefix=str(prefix),
                count=int(count),
                latest_failed_at=failed_at,
                example_job_id=str(example),
            )
        )
    # Sorted here too: ties (same count and time) come out in one order on every store.
    groups.sort(key=group_order)
    return groups[:max_groups], len(groups) > max_groups
