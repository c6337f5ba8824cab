"""Column async_jobs.traceparent: the W3C trace context of the Enqueue call that made
the job, so that each attempt's span (and the gateway call) joins the caller's trace.

Nullable, no default: on PostgreSQL `ADD COLUMN ... NULL` changes only the catalog
(no table rewrite, the ACCESS EXCLUSIVE lock is held for an instant), so it is safe
while old instances run; they never name the column.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Old instances run unchanged beside it (san_jobs.job_service.storage.schema_version).
expand_only = True


def upgrade() -> None:
    op.add_column("async_jobs", sa.Column("traceparent", sa.String(55), nullable=True))


def downgrade() -> None:
    op.drop_column("async_jobs", "traceparent")
