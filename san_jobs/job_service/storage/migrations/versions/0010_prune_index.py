"""Index ix_async_jobs_terminal_end: terminal jobs by (status, updated_at), for the
pruner (storage/prune.py).

A prune batch deletes the oldest jobs of one terminal status that ended before a
cutoff, and a dry run counts them: with this index each is a range scan that stops at
its LIMIT, instead of a scan of the whole table. Partial (terminal rows only), so the
queue's writes to active rows never touch it. 0009's (job_type, failed_at) index
serves FAILED only; COMPLETED and CANCELLED had nothing.

Built CONCURRENTLY on PostgreSQL, outside the revision's transaction (autocommit
block): no lock that would stop writers while old instances run.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Old instances run unchanged beside it (san_jobs.job_service.storage.schema_version).
expand_only = True

_NAME = "ix_async_jobs_terminal_end"
_WHERE = sa.text("status IN ('COMPLETED', 'FAILED', 'CANCELLED')")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        with op.get_context().autocommit_block():
            # A CONCURRENTLY build that failed leaves an INVALID index of this name.
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {_NAME}")
            op.create_index(
                _NAME,
                "async_jobs",
                ["status", "updated_at"],
                postgresql_where=_WHERE,
                postgresql_concurrently=True,
            )
    else:
        op.create_index(_NAME, "async_jobs", ["status", "updated_at"], sqlite_where=_WHERE)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        with op.get_context().autocommit_block():
            op.drop_index(_NAME, table_name="async_jobs", postgresql_concurrently=True)
    else:
        op.drop_index(_NAME, table_name="async_jobs")
