"""Delayed jobs (EnqueueRequest.schedule_time): column async_jobs.scheduled_at, the
time as given (Job.schedule_time), and the same column in job_changes, which the
change-feed trigger now copies too (the feed carries the job as it was).

No new rule for due_at, so ck_async_jobs_due_at stays as 0005 wrote it: while the
schedule time is ahead, Enqueue writes it to next_attempt_at as well ("when the next
attempt may start", as for a retry), and PENDING's due_at = COALESCE(next_attempt_at,
updated_at) is then the schedule time. The claim clears next_attempt_at, as after a
retry. A CHECK that read scheduled_at would have cost more than it gives: on SQLite a
changed CHECK means rebuilding async_jobs (batch mode), which drops the count
triggers of 0009, the tenant trigger of 0011 and the change trigger of 0013 with the
old table; and old instances, which never write scheduled_at, would have to derive
due_at by a rule they do not know. With this one they keep working unchanged: they
honour a delayed job's due_at (their claim filters on it), and their writes (claim,
cancel, release, retry) clear next_attempt_at as they always did.

Nullable, no default: on PostgreSQL `ADD COLUMN ... NULL` changes only the catalog
(no table rewrite). The trigger's function is replaced in place (CREATE OR REPLACE:
the trigger keeps pointing at it), so no change is missed meanwhile; SQLite's trigger
is dropped and created again in the migration's transaction. Changes recorded before
this revision (and those of rows enqueued by old instances) have scheduled_at NULL.

The trigger's SQL is written out here, not imported: a migration must not change
when the code does.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Old instances run unchanged beside it (san_jobs.job_service.storage.schema_version):
# they never name the new columns, and the trigger records their changes too.
expand_only = True

# 0013's snapshot, and scheduled_at.
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
)
SNAPSHOT_COLUMNS = (*_OLD_COLUMNS, "scheduled_at")

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


def upgrade() -> None:
    for table in ("async_jobs", "job_changes"):
        op.add_column(table, sa.Column("scheduled_at", sa.DateTime(timezone=True), nullable=True))
    _record(SNAPSHOT_COLUMNS)


def downgrade() -> None:
    _record(_OLD_COLUMNS)
    for table in ("job_changes", "async_jobs"):
        op.drop_column(table, "scheduled_at")
