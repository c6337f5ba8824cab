"""Lean indexes for a queue table; a claim token only on PROCESSING jobs.

Every claim and every outcome writes a new row version, and each version gets an
entry in every index that covers it. `request_id` is unset for most jobs and failed
jobs are few, so their indexes now hold only those rows: two index entries fewer per
row version (a third less index work per job), and no index on `status` alone that
the planner would pick to find PROCESSING rows among every dead version of them.

The CHECK ck_async_jobs_claimed states what the code always kept true: a job has a
claim token exactly while it is PROCESSING. Outcome writes rely on it to find their
rows by (id, token) alone.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

HAS_REQUEST_ID = "request_id IS NOT NULL"
IS_FAILED = "status = 'FAILED'"


CLAIMED = "(status = 'PROCESSING') = (claim_token IS NOT NULL)"


def upgrade() -> None:
    with op.batch_alter_table("async_jobs") as batch:  # SQLite rebuilds the table for it
        batch.create_check_constraint(op.f("ck_async_jobs_claimed"), CLAIMED)
    op.drop_index("uq_async_jobs_request_id", table_name="async_jobs")
    op.create_index(
        "uq_async_jobs_request_id",
        "async_jobs",
        ["request_id"],
        unique=True,
        sqlite_where=sa.text(HAS_REQUEST_ID),
        postgresql_where=sa.text(HAS_REQUEST_ID),
    )
    op.drop_index("ix_async_jobs_status_failed_at", table_name="async_jobs")
    op.create_index(
        "ix_async_jobs_failed_at",
        "async_jobs",
        ["failed_at"],
        sqlite_where=sa.text(IS_FAILED),
        postgresql_where=sa.text(IS_FAILED),
    )


def downgrade() -> None:
    with op.batch_alter_table("async_jobs") as batch:
        batch.drop_constraint(op.f("ck_async_jobs_claimed"), type_="check")
    op.drop_index("ix_async_jobs_failed_at", table_name="async_jobs")
    op.create_index("ix_async_jobs_status_failed_at", "async_jobs", ["status", "failed_at"])
    op.drop_index("uq_async_jobs_request_id", table_name="async_jobs")
    op.create_index("uq_async_jobs_request_id", "async_jobs", ["request_id"], unique=True)
