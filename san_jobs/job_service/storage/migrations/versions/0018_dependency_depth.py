"""How deep each dependent job is in its chain (domain/dependencies.py's
MAX_DEPENDENCY_DEPTH): async_jobs.dependency_depth, written by the Enqueue of a job
with depends_on (one more than its deepest dependency's), read by the Enqueue of its
own dependents to refuse a chain deeper than the bound.

NULL for every job without dependencies and for the dependents stored before this
version: both read as 0. A chain stored before the bound may be deeper than it; its
end is still written, by the completer's fallback (storage/dependencies.py,
`end_unsettled`), which ends dependents level by level without the trigger.

Nullable with no default: on PostgreSQL a change of the catalog only, on SQLite an
ALTER TABLE ADD COLUMN (no rebuild). Old instances never write it: a job they enqueue
has no dependencies.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
expand_only = True


def upgrade() -> None:
    op.add_column("async_jobs", sa.Column("dependency_depth", sa.SmallInteger(), nullable=True))


def downgrade() -> None:
    op.drop_column("async_jobs", "dependency_depth")
