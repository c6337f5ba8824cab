"""The change feed (StreamJobChanges): every move of a job into COMPLETED, FAILED or
CANCELLED, and RetryFailed's FAILED -> PENDING, recorded by the database itself.

- job_changes: one row per change, a snapshot of the job right after it (every column
  but its input, claim token, lease and due time: the feed carries results, not
  inputs, so a change costs its result's size and not the text's). `pos` is the
  change's place in the feed; `id` only the order rows were written in.
- job_change_feed: one row. `feed_id` (random, made here) tells this feed's cursors
  from another database's; `last_pos` the last position given; `pruned_through` the
  last position deleted by retention (a cursor below it has lost changes).
- A trigger on async_jobs writes the row, whichever code path makes the change (the
  worker, CancelJob, RetryFailed, an operator's SQL): old instances that do not know
  the feed record changes too.

Positions. SQLite has one writer at a time, so its trigger gives the position at once
(the counter row is updated in the writer's transaction). On PostgreSQL, transactions
commit in another order than they write: a position given at write time would let a
reader see 12 before 11 commits and skip 11 for ever. So the trigger writes pos NULL,
and a sequencer (storage/changes.py) gives positions to committed rows only, holding
the counter row's lock: the positions a reader can see are always a gap-free prefix.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04
"""

import secrets
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Old instances run unchanged beside it (san_jobs.job_service.storage.schema_version):
# they never name the new tables, and the trigger records their changes too.
expand_only = True

# The job's columns a change keeps (the same names in both tables).
SNAPSHOT_COLUMNS = (
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
_INTO = ", ".join(("job_id", "changed_at", *SNAPSHOT_COLUMNS))
_FROM_NEW = ", ".join(("NEW.id", "NEW.updated_at", *(f"NEW.{c}" for c in SNAPSHOT_COLUMNS)))

# A change: a status move into an end, or FAILED -> PENDING (RetryFailed).
_IS_CHANGE = (
    "NEW.status IN ('COMPLETED', 'FAILED', 'CANCELLED')"
    " OR (OLD.status = 'FAILED' AND NEW.status = 'PENDING')"
)

PG_FUNCTION = f"""
CREATE FUNCTION async_jobs_record_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_changes ({_INTO}) VALUES ({_FROM_NEW});
    RETURN NULL;
END
$$
"""
# The WHEN test runs without calling the function: claims, lease renewals and retries
# scheduled by the worker (PROCESSING -> PENDING) cost nothing here.
PG_TRIGGER = (
    "CREATE TRIGGER tr_async_jobs_change AFTER UPDATE OF status ON async_jobs"
    f" FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status AND ({_IS_CHANGE}))"
    " EXECUTE FUNCTION async_jobs_record_change()"
)
PG_HAS_LZ4 = (
    "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
)
PG_DROP = (
    "DROP TRIGGER IF EXISTS tr_async_jobs_change ON async_jobs",
    "DROP FUNCTION IF EXISTS async_jobs_record_change()",
)

SQLITE_TRIGGER = (
    "CREATE TRIGGER tr_async_jobs_change AFTER UPDATE OF status ON async_jobs"
    f" WHEN OLD.status IS NOT NEW.status AND ({_IS_CHANGE})"
    " BEGIN"
    " UPDATE job_change_feed SET last_pos = last_pos + 1 WHERE id = 1;"
    f" INSERT INTO job_changes (pos, {_INTO})"
    f" SELECT f.last_pos, {_FROM_NEW} FROM job_change_feed f WHERE f.id = 1;"
    " END"
)
SQLITE_DROP = ("DROP TRIGGER IF EXISTS tr_async_jobs_change",)


def _json() -> sa.types.TypeEngine[object]:
    from sqlalchemy.dialects.postgresql import JSONB

    return sa.JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")


def _time(name: str, nullable: bool = True) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.create_table(
        "job_change_feed",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("feed_id", sa.String(32), nullable=False),
        sa.Column("last_pos", sa.BigInteger, nullable=False),
        sa.Column("pruned_through", sa.BigInteger, nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_job_change_feed_one_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_change_feed")),
    )
    op.execute(
        sa.text(
            "INSERT INTO job_change_feed (id, feed_id, last_pos, pruned_through)"
            " VALUES (1, :feed_id, 0, 0)"
        ).bindparams(feed_id=secrets.token_hex(8))
    )
    op.create_table(
        "job_changes",
        # INTEGER PRIMARY KEY on SQLite (the rowid), BIGSERIAL-like identity on PostgreSQL.
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("pos", sa.BigInteger, nullable=True),
        _time("changed_at", nullable=False),
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("job_type", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("target_id", sa.String(256), nullable=False),
        sa.Column("requested_by", sa.String(256), nullable=False),
        sa.Column("request_id", sa.String(256), nullable=True),
        sa.Column("result", _json(), nullable=True),
        sa.Column("error_message", sa.Text, nullable=True),
        sa.Column("error_code", sa.String(64), nullable=True),
        sa.Column("error_reason", sa.String(128), nullable=True),
        sa.Column("attempt_count", sa.Integer, nullable=False),
        sa.Column("max_attempts", sa.Integer, nullable=False),
        sa.Column("attempts", _json(), nullable=False),
        _time("created_at", nullable=False),
        _time("updated_at", nullable=False),
        _time("started_at"),
        _time("completed_at"),
        _time("failed_at"),
        _time("cancelled_at"),
        sa.Column("cancel_reason", sa.Text, nullable=True),
        _time("next_attempt_at"),
        sa.Column("traceparent", sa.String(55), nullable=True),
        sa.Column("tenant", sa.String(256), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_changes")),
    )
    positioned = sa.text("pos IS NOT NULL")
    unpositioned = sa.text("pos IS NULL")
    op.create_index(
        "uq_job_changes_pos",
        "job_changes",
        ["pos"],
        unique=True,
        sqlite_where=positioned,
        postgresql_where=positioned,
    )
    # The sequencer's work list: only rows still waiting for a position (always empty
    # on SQLite, whose rows are born positioned).
    op.create_index(
        "ix_job_changes_unpositioned",
        "job_changes",
        ["id"],
        sqlite_where=unpositioned,
        postgresql_where=unpositioned,
    )
    if postgres:
        # The snapshot's two large values (an embedding's result is ~5 KiB of JSON)
        # are compressed as they are copied: LZ4 costs a fraction of the default
        # pglz's CPU, where the server has it (PostgreSQL 14+ built with lz4).
        if op.get_bind().execute(sa.text(PG_HAS_LZ4)).scalar():
            for column in ("result", "attempts"):
                op.execute(f"ALTER TABLE job_changes ALTER COLUMN {column} SET COMPRESSION lz4")
        op.execute(PG_FUNCTION)
        op.execute(PG_TRIGGER)
    else:
        op.execute(SQLITE_TRIGGER)


def downgrade() -> None:
    for statement in PG_DROP if op.get_bind().dialect.name == "postgresql" else SQLITE_DROP:
        op.execute(statement)
    op.drop_table("job_changes")
    op.drop_table("job_change_feed")
