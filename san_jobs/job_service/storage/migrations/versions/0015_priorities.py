"""Priorities (EnqueueRequest.priority): column async_jobs.priority, 1 (most urgent)
to 5, default 3, and the same column in job_changes, which the change-feed trigger
now copies too (the feed carries the job as it was).

NOT NULL DEFAULT 3: on PostgreSQL (11 and later) a constant default is written to
the catalog only, no table rewrite; old instances, which never name the column, get
3 for their rows. No CHECK: on SQLite a new CHECK means rebuilding async_jobs (see
0014); the service checks the range before it writes.

The claim by priority reads the partial index ix_async_jobs_due_priority (priority,
due_at) over active rows: one ordered range scan, as the claim by age reads
ix_async_jobs_due. Built CONCURRENTLY on PostgreSQL (an autocommit block, as 0009's),
so instances keep claiming while it builds; it holds only the queue, so it is small.

The trigger's SQL is written out here, not imported: a migration must not change
when the code does.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Old instances run unchanged beside it (san_jobs.job_service.storage.schema_version).
expand_only = True

# 0014's snapshot, and priority.
_OLD_COLUMNS = (
    "job_type",
    "status",
    "target_id",
    "requested_by",
    "request_id",
    "result",
    "error_message",
    "error_code",
    "error_reason",
    "attempt_count",
    "max_attempts",
    "attempts",
    "created_at",
    "updated_at",
    "started_at",
    "completed_at",
    "failed_at",
    "cancelled_at",
    "cancel_reason",
    "next_attempt_at",
    "traceparent",
    "tenant",
    "scheduled_at",
)
SNAPSHOT_COLUMNS = (*_OLD_COLUMNS, "priority")

_IS_CHANGE = (
    "NEW.status IN ('COMPLETED', 'FAILED', 'CANCELLED')"
    " OR (OLD.status = 'FAILED' AND NEW.status = 'PENDING')"
)


def _into(columns: Sequence[str]) -> str:
    return ", ".join(("job_id", "changed_at", *columns))


def _from_new(columns: Sequence[str]) -> str:
    return ", ".join(("NEW.id", "NEW.updated_at", *(f"NEW.{c}" for c in columns)))


def _pg_function(columns: Sequence[str]) -> str:
    return f"""
CREATE OR REPLACE FUNCTION async_jobs_record_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_changes ({_into(columns)}) VALUES ({_from_new(columns)});
    RETURN NULL;
END
$$
"""


def _sqlite_trigger(columns: Sequence[str]) -> str:
    return (
        "CREATE TRIGGER tr_async_jobs_change AFTER UPDATE OF status ON async_jobs"
        f" WHEN OLD.status IS NOT NEW.status AND ({_IS_CHANGE})"
        " BEGIN"
        " UPDATE job_change_feed SET last_pos = last_pos + 1 WHERE id = 1;"
        f" INSERT INTO job_changes (pos, {_into(columns)})"
        f" SELECT f.last_pos, {_from_new(columns)} FROM job_change_feed f WHERE f.id = 1;"
        " END"
    )


def _record(columns: Sequence[str]) -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_pg_function(columns))
        return
    op.execute("DROP TRIGGER IF EXISTS tr_async_jobs_change")
    op.execute(_sqlite_trigger(columns))


_DUE_PRIORITY = "ix_async_jobs_due_priority"
_ACTIVE = "status IN ('PENDING', 'PROCESSING')"


def upgrade() -> None:
    for table in ("async_jobs", "job_changes"):
        op.add_column(
            table,
            sa.Column("priority", sa.SmallInteger(), nullable=False, server_default=sa.text("3")),
        )
    _record(SNAPSHOT_COLUMNS)
    if op.get_bind().dialect.name == "postgresql":
        with op.get_context().autocommit_block():
            # A CONCURRENTLY build that failed leaves an INVALID index of this name.
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {_DUE_PRIORITY}")
            op.create_index(
                _DUE_PRIORITY,
                "async_jobs",
                ["priority", "due_at"],
                postgresql_where=sa.text(_ACTIVE),
                postgresql_concurrently=True,
            )
    else:
        op.create_index(
            _DUE_PRIORITY, "async_jobs", ["priority", "due_at"], sqlite_where=sa.text(_ACTIVE)
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        with op.get_context().autocommit_block():
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {_DUE_PRIORITY}")
    else:
        op.drop_index(_DUE_PRIORITY, table_name="async_jobs")
    _record(_OLD_COLUMNS)
    for table in ("job_changes", "async_jobs"):
        op.drop_column(table, "priority")
