"""Open job types: drop the CHECK that listed them.

The job types are declared once, in san_jobs/job_service/domain/job_types.py, and the API
boundary accepts only registered names. A CHECK listing them made every new type a
migration; without it, adding a type touches no schema.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The three types that existed when the CHECK was dropped; a downgrade restores it as 0001
# wrote it (and fails if rows of a later type are stored, as it should).
_TYPES_OF_0001 = "job_type IN ('CARD_ANALYSIS', 'TIL_GENERATION', 'RECALL_GENERATION')"


def upgrade() -> None:
    with op.batch_alter_table("async_jobs") as batch:  # SQLite rebuilds the table for it
        batch.drop_constraint(op.f("ck_async_jobs_job_type"), type_="check")


def downgrade() -> None:
    with op.batch_alter_table("async_jobs") as batch:
        batch.create_check_constraint(op.f("ck_async_jobs_job_type"), _TYPES_OF_0001)
