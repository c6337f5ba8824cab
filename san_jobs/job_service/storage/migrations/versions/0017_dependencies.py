"""Dependencies (EnqueueRequest.depends_on, domain/dependencies.py): four columns on
async_jobs, the table job_dependencies, and a trigger that ends a dependency's
waiting dependents in the statement that ends it.

- async_jobs.depends_on (the ids as given, JSON), dependencies_left (while waiting:
  how many are not COMPLETED), has_dependents (the trigger's WHEN: a job nobody
  depends on pays one boolean test per status change), inputs_merged_at.
- job_dependencies (job_id, depends_on_id, position): found by depends_on_id.
- The trigger, AFTER UPDATE OF status, for a row with has_dependents entering
  COMPLETED: each waiting dependent's count goes down by one, and the one at 0 gets
  next_attempt_at = its schedule time if ahead, else NULL, so due_at (0005's rule,
  unchanged: a waiting job's next_attempt_at is a time no clock reaches) makes it
  due in this very transaction. Entering FAILED or CANCELLED: each waiting dependent
  is CANCELLED, "Dependency <id> FAILED", and the trigger fires again for it (its own
  dependents; SQLite needs PRAGMA recursive_triggers, which every connection of this
  version sets). On PostgreSQL it also notifies the instances (payload
  "|PENDING|ids" or "|CANCELLED|ids", from no instance: every one listens).

No CHECK changes, so no table rebuild on SQLite (0014 says why that matters). Old
instances run beside it: they never write the new columns (a job they enqueue has no
dependencies), they honour a waiting job's due_at, and the trigger ends dependents of
the jobs they complete or fail too.

The SQL is written out here, not imported: a migration must not change when the code
does.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
expand_only = True

_ENDED_MESSAGE = "'Dependency ' || NEW.id || ' ' || NEW.status"
# The dependents of NEW that still wait.
_WAITING = "status = 'PENDING' AND dependencies_left > 0"
_OF_NEW = "id IN (SELECT job_id FROM job_dependencies WHERE depends_on_id = NEW.id)"
# NEW completed: one dependency less; the last one makes the job due (its schedule
# time if still ahead), as 0005's due_at rule reads the new values.
_ONE_LESS = """dependencies_left = dependencies_left - 1,
    next_attempt_at = CASE WHEN dependencies_left > 1 THEN next_attempt_at
        WHEN scheduled_at > NEW.updated_at THEN scheduled_at END,
    updated_at = NEW.updated_at,
    due_at = CASE WHEN dependencies_left > 1 THEN due_at
        WHEN scheduled_at > NEW.updated_at THEN scheduled_at
        ELSE NEW.updated_at END"""
# NEW failed or was cancelled: the dependent ends CANCELLED, naming it.
_ENDED = f"""status = 'CANCELLED',
    cancelled_at = NEW.updated_at,
    updated_at = NEW.updated_at,
    next_attempt_at = NULL,
    due_at = NULL,
    cancel_reason = {_ENDED_MESSAGE},
    error_message = {_ENDED_MESSAGE},
    error_code = 'CANCELLED',
    error_reason = 'DEPENDENCY_ENDED'"""

_PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION async_jobs_end_dependents() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ids text;
    n integer;
BEGIN
    IF NEW.status = 'COMPLETED' THEN
        WITH moved AS (
            UPDATE async_jobs SET
                {_ONE_LESS}
            WHERE {_WAITING} AND {_OF_NEW}
            RETURNING id, dependencies_left
        )
        SELECT string_agg(id, ','), count(*) INTO ids, n FROM moved WHERE dependencies_left = 0;
        IF n > 0 THEN
            PERFORM pg_notify('san_jobs', '|PENDING|' || CASE WHEN n <= 150 THEN ids ELSE '' END);
        END IF;
    ELSE
        WITH ended AS (
            UPDATE async_jobs SET
                {_ENDED}
            WHERE {_WAITING} AND {_OF_NEW}
            RETURNING id
        )
        SELECT string_agg(id, ','), count(*) INTO ids, n FROM ended;
        IF n > 0 THEN
            PERFORM pg_notify('san_jobs', '|CANCELLED|' || CASE WHEN n <= 150 THEN ids ELSE '' END);
        END IF;
    END IF;
    RETURN NULL;
END
$$
"""

_PG_TRIGGER = """
CREATE TRIGGER tr_async_jobs_dependents AFTER UPDATE OF status ON async_jobs
FOR EACH ROW WHEN (NEW.has_dependents AND OLD.status IS DISTINCT FROM NEW.status
    AND NEW.status IN ('COMPLETED', 'FAILED', 'CANCELLED'))
EXECUTE FUNCTION async_jobs_end_dependents()
"""

_SQLITE_COMPLETED = f"""
CREATE TRIGGER tr_async_jobs_dependents_completed AFTER UPDATE OF status ON async_jobs
WHEN NEW.has_dependents AND OLD.status IS NOT NEW.status AND NEW.status = 'COMPLETED'
BEGIN
    UPDATE async_jobs SET
        {_ONE_LESS}
    WHERE {_WAITING} AND {_OF_NEW};
END
"""

_SQLITE_ENDED = f"""
CREATE TRIGGER tr_async_jobs_dependents_ended AFTER UPDATE OF status ON async_jobs
WHEN NEW.has_dependents AND OLD.status IS NOT NEW.status
    AND NEW.status IN ('FAILED', 'CANCELLED')
BEGIN
    UPDATE async_jobs SET
        {_ENDED}
    WHERE {_WAITING} AND {_OF_NEW};
END
"""

# A deleted (pruned) dependent's rows go with it; no foreign key, so that an
# operator's TRUNCATE async_jobs still works (it leaves rows naming no job: harmless).
_PG_FORGET_FUNCTION = """
CREATE OR REPLACE FUNCTION async_jobs_forget_dependencies() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM job_dependencies WHERE job_id = OLD.id;
    RETURN NULL;
END
$$
"""
_PG_FORGET_TRIGGER = """
CREATE TRIGGER tr_async_jobs_forget_dependencies AFTER DELETE ON async_jobs
FOR EACH ROW WHEN (OLD.depends_on IS NOT NULL) EXECUTE FUNCTION async_jobs_forget_dependencies()
"""
_SQLITE_FORGET = """
CREATE TRIGGER tr_async_jobs_forget_dependencies AFTER DELETE ON async_jobs
WHEN OLD.depends_on IS NOT NULL
BEGIN
    DELETE FROM job_dependencies WHERE job_id = OLD.id;
END
"""


def upgrade() -> None:
    json_type = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
    # Nullable or with a constant default: on PostgreSQL a change of the catalog only.
    op.add_column("async_jobs", sa.Column("depends_on", json_type, nullable=True))
    op.add_column("async_jobs", sa.Column("dependencies_left", sa.Integer(), nullable=True))
    op.add_column(
        "async_jobs",
        sa.Column("has_dependents", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.add_column(
        "async_jobs", sa.Column("inputs_merged_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.create_table(
        "job_dependencies",
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("depends_on_id", sa.String(36), nullable=False),
        sa.Column("position", sa.SmallInteger(), nullable=False),
        sa.PrimaryKeyConstraint("job_id", "depends_on_id", name="pk_job_dependencies"),
    )
    op.create_index("ix_job_dependencies_depends_on_id", "job_dependencies", ["depends_on_id"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_PG_FUNCTION)
        op.execute(_PG_TRIGGER)
        op.execute(_PG_FORGET_FUNCTION)
        op.execute(_PG_FORGET_TRIGGER)
    else:
        op.execute(_SQLITE_COMPLETED)
        op.execute(_SQLITE_ENDED)
        op.execute(_SQLITE_FORGET)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS tr_async_jobs_dependents ON async_jobs")
        op.execute("DROP FUNCTION IF EXISTS async_jobs_end_dependents()")
        op.execute("DROP TRIGGER IF EXISTS tr_async_jobs_forget_dependencies ON async_jobs")
        op.execute("DROP FUNCTION IF EXISTS async_jobs_forget_dependencies()")
    else:
        op.execute("DROP TRIGGER IF EXISTS tr_async_jobs_forget_dependencies")
        op.execute("DROP TRIGGER IF EXISTS tr_async_jobs_dependents_completed")
        op.execute("DROP TRIGGER IF EXISTS tr_async_jobs_dependents_ended")
    op.drop_table("job_dependencies")
    for column in ("inputs_merged_at", "has_dependents", "dependencies_left", "depends_on"):
        op.drop_column("async_jobs", column)
