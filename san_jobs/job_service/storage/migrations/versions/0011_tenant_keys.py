"""Keys scoped to the tenant: column async_jobs.tenant, and the two unique indexes
(request_id; the active (job_type, target_id)) per tenant instead of global.

A tenant is the namespace of a caller's keys (issue 22): under --auth token the
authenticated caller's token name (the requested_by it is bound to), under --auth off
"" (one tenant). The new code writes it with every job (NewJob.tenant).

Rows already there, and rows that code older than 0011 writes during a rolling
deploy (it does not know the column), get the tenant the new code would have given
them: requested_by when it names a token of api_tokens (under --auth token every job
is requested by its caller's token name), "" otherwise (--auth off). A trigger does it
for the old code's INSERTs (BEFORE INSERT on PostgreSQL; AFTER INSERT on SQLite, which
cannot change NEW), only when tenant is NULL, so the new code's rows never call it.
The old code's INSERT is `ON CONFLICT DO NOTHING` without a conflict target: it keeps
working on the new indexes, a repeat within its tenant refused as before. (Its own
lookups of the winner stay global until it is gone: an old instance may still answer
with another tenant's job when two tenants share a key.)

PostgreSQL, beside running instances: the column and the trigger in one short
transaction (no gap where an old instance's row would be missed); the backfill in
batches by primary key, each committed alone (a short lock on few rows, never the
table); the new indexes built CONCURRENTLY while the old ones still hold every row
unique (so the builds cannot fail on duplicates), then the old ones dropped
CONCURRENTLY. Each step runs again unharmed after a stop (IF NOT EXISTS, a NULL
tenant only, an INVALID leftover index dropped first). SQLite: the same, plainly.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Old instances run unchanged beside it (san_jobs.job_service.storage.schema_version).
expand_only = True

_ACTIVE = "status IN ('PENDING', 'PROCESSING')"
_HAS_REQUEST_ID = "request_id IS NOT NULL"
# name -> (columns, predicate)
_NEW_INDEXES = {
    "uq_async_jobs_tenant_active_target": (["job_type", "target_id", "tenant"], _ACTIVE),
    "uq_async_jobs_tenant_request_id": (["request_id", "tenant"], _HAS_REQUEST_ID),
}
_OLD_INDEXES = {
    "uq_async_jobs_active_target": (["job_type", "target_id"], _ACTIVE),
    "uq_async_jobs_request_id": (["request_id"], _HAS_REQUEST_ID),
}

# The tenant of a row written without one (`row` is NEW in a trigger, the table in
# the backfill): the same rule in both.
_TENANT_OF = (
    "CASE WHEN EXISTS (SELECT 1 FROM api_tokens WHERE api_tokens.name = {row}.requested_by)"
    " THEN {row}.requested_by ELSE '' END"
)

PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION async_jobs_default_tenant() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.tenant := {_TENANT_OF.format(row="NEW")};
    RETURN NEW;
END
$$
"""
PG_TRIGGER = (
    "CREATE TRIGGER tr_async_jobs_default_tenant BEFORE INSERT ON async_jobs"
    " FOR EACH ROW WHEN (NEW.tenant IS NULL) EXECUTE FUNCTION async_jobs_default_tenant()"
)
SQLITE_TRIGGER = (
    "CREATE TRIGGER tr_async_jobs_default_tenant AFTER INSERT ON async_jobs"
    " WHEN NEW.tenant IS NULL BEGIN"
    f" UPDATE async_jobs SET tenant = {_TENANT_OF.format(row='NEW')} WHERE id = NEW.id; END"
)
_DROP_PG_TRIGGER = (
    "DROP TRIGGER IF EXISTS tr_async_jobs_default_tenant ON async_jobs",
    "DROP FUNCTION IF EXISTS async_jobs_default_tenant()",
)

# Rows per backfill transaction on PostgreSQL.
BACKFILL_BATCH = 5_000
_NEXT_BATCH_END = sa.text(
    "SELECT max(id) FROM (SELECT id FROM async_jobs WHERE id > :after ORDER BY id LIMIT :n) AS b"
)
_BACKFILL_RANGE = sa.text(
    f"UPDATE async_jobs SET tenant = {_TENANT_OF.format(row='async_jobs')}"
    " WHERE id > :after AND id <= :upto AND tenant IS NULL"
)
_BACKFILL_ALL = sa.text(
    f"UPDATE async_jobs SET tenant = {_TENANT_OF.format(row='async_jobs')} WHERE tenant IS NULL"
)


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        _upgrade_sqlite()
        return
    columns = {c["name"] for c in sa.inspect(bind).get_columns("async_jobs")}
    if "tenant" not in columns:
        op.add_column("async_jobs", sa.Column("tenant", sa.String(256), nullable=True))
    op.execute(PG_FUNCTION)
    op.execute(_DROP_PG_TRIGGER[0])
    op.execute(PG_TRIGGER)
    with op.get_context().autocommit_block():
        # The column and the trigger are committed: every row inserted from now on
        # has its tenant; the rows before get theirs, a batch per transaction.
        after = ""
        while True:
            upto = bind.execute(_NEXT_BATCH_END, {"after": after, "n": BACKFILL_BATCH}).scalar()
            if upto is None:
                break
            bind.execute(_BACKFILL_RANGE, {"after": after, "upto": upto})
            after = upto
        for name, (index_columns, where) in _NEW_INDEXES.items():
            # A CONCURRENTLY build that failed leaves an INVALID index of this name.
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
            op.create_index(
                name,
                "async_jobs",
                index_columns,
                unique=True,
                postgresql_where=sa.text(where),
                postgresql_concurrently=True,
            )
        for name in _OLD_INDEXES:
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")


def _upgrade_sqlite() -> None:
    op.add_column("async_jobs", sa.Column("tenant", sa.String(256), nullable=True))
    op.execute(_BACKFILL_ALL)
    op.execute(SQLITE_TRIGGER)
    for name, (index_columns, where) in _NEW_INDEXES.items():
        op.create_index(name, "async_jobs", index_columns, unique=True, sqlite_where=sa.text(where))
    for name in _OLD_INDEXES:
        op.drop_index(name, table_name="async_jobs")


def downgrade() -> None:
    """Back to global keys: fails (unique violation) if two tenants share a key."""
    postgres = op.get_bind().dialect.name == "postgresql"
    if postgres:
        with op.get_context().autocommit_block():
            for name, (index_columns, where) in _OLD_INDEXES.items():
                op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
                op.create_index(
                    name,
                    "async_jobs",
                    index_columns,
                    unique=True,
                    postgresql_where=sa.text(where),
                    postgresql_concurrently=True,
                )
            for name in _NEW_INDEXES:
                op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
        for statement in _DROP_PG_TRIGGER:
            op.execute(statement)
    else:
        for name, (index_columns, where) in _OLD_INDEXES.items():
            op.create_index(
                name, "async_jobs", index_columns, unique=True, sqlite_where=sa.text(where)
            )
        for name in _NEW_INDEXES:
            op.drop_index(name, table_name="async_jobs")
        op.execute("DROP TRIGGER IF EXISTS tr_async_jobs_default_tenant")
    op.drop_column("async_jobs", "tenant")
