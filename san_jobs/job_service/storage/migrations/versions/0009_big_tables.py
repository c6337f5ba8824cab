"""Operator queries that stay fast on big tables: counts kept by triggers, and indexes.

- async_job_counts / async_job_count_deltas and the triggers that keep them
  (storage/py): GetJobStats and every metrics scrape read a few rows instead of
  counting every job (6.3 s at ten million finished jobs). The counts of the rows
  already there are taken in the same transaction that creates the triggers: creating
  a trigger locks out writers until commit, so the backfill and the triggers meet
  exactly (no row missed or counted twice). That GROUP BY is one pass over the table
  while writers wait (about 4 s at ten million rows on a small machine).
- Partial indexes, built CONCURRENTLY on PostgreSQL outside that transaction (an
  autocommit block), so old instances keep writing while they build:
  ix_async_jobs_failed_type_at (job_type, failed_at) over FAILED rows: RetryFailed
  and ListJobs "FAILED of these types in this time range";
  ix_async_jobs_pending_created_at and ix_async_jobs_pending_type_due over PENDING
  rows: stats' oldest PENDING job and each type's oldest due job, one probe each.
  The PENDING indexes hold only the queue, so their size follows the backlog, not
  the history.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Old instances run unchanged beside it (san_jobs.job_service.storage.schema_version).
expand_only = True

# -- PostgreSQL ------------------------------------------------------------------------

PG_FUNCTION = """
CREATE FUNCTION async_jobs_count_delta() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO async_job_count_deltas (job_type, status, delta)
        VALUES (NEW.job_type, NEW.status, 1);
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO async_job_count_deltas (job_type, status, delta)
        VALUES (OLD.job_type, OLD.status, -1);
    ELSE
        INSERT INTO async_job_count_deltas (job_type, status, delta)
        VALUES (OLD.job_type, OLD.status, -1), (NEW.job_type, NEW.status, 1);
    END IF;
    RETURN NULL;
END
$$
"""

# TRUNCATE fires no row trigger: the counts are emptied with the table.
PG_TRUNCATE_FUNCTION = """
CREATE FUNCTION async_jobs_counts_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM async_job_count_deltas;
    DELETE FROM async_job_counts;
    RETURN NULL;
END
$$
"""

# The WHEN test runs without calling the function: an UPDATE that leaves the status as
# it was (a lease renewal, a re-claim of an expired lease) costs nothing here.
PG_TRIGGERS = (
    "CREATE TRIGGER tr_async_jobs_count_insert AFTER INSERT ON async_jobs"
    " FOR EACH ROW EXECUTE FUNCTION async_jobs_count_delta()",
    "CREATE TRIGGER tr_async_jobs_count_update AFTER UPDATE OF status, job_type ON async_jobs"
    " FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status"
    " OR OLD.job_type IS DISTINCT FROM NEW.job_type)"
    " EXECUTE FUNCTION async_jobs_count_delta()",
    "CREATE TRIGGER tr_async_jobs_count_delete AFTER DELETE ON async_jobs"
    " FOR EACH ROW EXECUTE FUNCTION async_jobs_count_delta()",
    "CREATE TRIGGER tr_async_jobs_count_truncate AFTER TRUNCATE ON async_jobs"
    " FOR EACH STATEMENT EXECUTE FUNCTION async_jobs_counts_truncated()",
)

PG_DROP = (
    "DROP TRIGGER IF EXISTS tr_async_jobs_count_insert ON async_jobs",
    "DROP TRIGGER IF EXISTS tr_async_jobs_count_update ON async_jobs",
    "DROP TRIGGER IF EXISTS tr_async_jobs_count_delete ON async_jobs",
    "DROP TRIGGER IF EXISTS tr_async_jobs_count_truncate ON async_jobs",
    "DROP FUNCTION IF EXISTS async_jobs_count_delta()",
    "DROP FUNCTION IF EXISTS async_jobs_counts_truncated()",
)

# -- SQLite ----------------------------------------------------------------------------

_SQLITE_ADD = (
    "INSERT INTO async_job_counts (job_type, status, n) VALUES (NEW.job_type, NEW.status, 1)"
    " ON CONFLICT (job_type, status) DO UPDATE SET n = n + 1;"
)
_SQLITE_SUBTRACT = (
    "UPDATE async_job_counts SET n = n - 1 WHERE job_type = OLD.job_type AND status = OLD.status;"
)

SQLITE_TRIGGERS = (
    f"CREATE TRIGGER tr_async_jobs_count_insert AFTER INSERT ON async_jobs BEGIN {_SQLITE_ADD} END",
    f"CREATE TRIGGER tr_async_jobs_count_update AFTER UPDATE OF status, job_type ON async_jobs"
    f" WHEN OLD.status IS NOT NEW.status OR OLD.job_type IS NOT NEW.job_type"
    f" BEGIN {_SQLITE_SUBTRACT} {_SQLITE_ADD} END",
    f"CREATE TRIGGER tr_async_jobs_count_delete AFTER DELETE ON async_jobs"
    f" BEGIN {_SQLITE_SUBTRACT} END",
)

SQLITE_DROP = (
    "DROP TRIGGER IF EXISTS tr_async_jobs_count_insert",
    "DROP TRIGGER IF EXISTS tr_async_jobs_count_update",
    "DROP TRIGGER IF EXISTS tr_async_jobs_count_delete",
)

# The counts of the rows there are now (run once, with the triggers, in one
# transaction: the trigger DDL locks writers out until it commits, so no row is
# counted twice or missed).
BACKFILL = (
    "INSERT INTO async_job_counts (job_type, status, n)"
    " SELECT job_type, status, COUNT(*) FROM async_jobs GROUP BY job_type, status"
)

_IS_FAILED = "status = 'FAILED'"
_IS_PENDING = "status = 'PENDING'"
# name -> (columns, predicate)
_INDEXES = {
    "ix_async_jobs_failed_type_at": (["job_type", "failed_at"], _IS_FAILED),
    "ix_async_jobs_pending_created_at": (["created_at"], _IS_PENDING),
    "ix_async_jobs_pending_type_due": (["job_type", "due_at"], _IS_PENDING),
}


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    # The counts part commits as a whole before the index builds (autocommit block):
    # a run stopped during a build (lock_timeout) has it already and must not redo it.
    if not sa.inspect(op.get_bind()).has_table("async_job_counts"):
        _counts(postgres)
    if postgres:
        with op.get_context().autocommit_block():
            for name, (columns, where) in _INDEXES.items():
                # A CONCURRENTLY build that failed leaves an INVALID index of this name.
                op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
                op.create_index(
                    name,
                    "async_jobs",
                    columns,
                    postgresql_where=sa.text(where),
                    postgresql_concurrently=True,
                )
    else:
        for name, (columns, where) in _INDEXES.items():
            op.create_index(name, "async_jobs", columns, sqlite_where=sa.text(where))


def _counts(postgres: bool) -> None:
    """The counts' tables, their triggers and the backfill, in one transaction."""
    op.create_table(
        "async_job_counts",
        sa.Column("job_type", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("job_type", "status", name=op.f("pk_async_job_counts")),
    )
    op.create_table(
        "async_job_count_deltas",
        sa.Column("job_type", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("delta", sa.Integer(), nullable=False),
    )
    if postgres:
        op.execute(PG_FUNCTION)
        op.execute(PG_TRUNCATE_FUNCTION)
        for statement in PG_TRIGGERS:
            op.execute(statement)
    else:
        for statement in SQLITE_TRIGGERS:
            op.execute(statement)
    op.execute(BACKFILL)


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    if postgres:
        with op.get_context().autocommit_block():
            for name in _INDEXES:
                op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
        for statement in PG_DROP:
            op.execute(statement)
    else:
        for name in _INDEXES:
            op.drop_index(name, table_name="async_jobs")
        for statement in SQLITE_DROP:
            op.execute(statement)
    op.drop_table("async_job_count_deltas")
    op.drop_table("async_job_counts")
