"""Create async_jobs.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ACTIVE = "status IN ('PENDING', 'PROCESSING')"


def _json() -> sa.types.TypeEngine:
    return sa.JSON(none_as_null=True).with_variant(
        postgresql.JSONB(none_as_null=True), "postgresql"
    )


def _ts() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "async_jobs",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("job_type", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("target_id", sa.String(256), nullable=False),
        sa.Column("request_params", _json(), nullable=False),
        sa.Column("requested_by", sa.String(256), server_default="", nullable=False),
        sa.Column("request_id", sa.String(256), nullable=True),
        sa.Column("result", _json(), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("error_code", sa.String(64), nullable=True),
        sa.Column("error_reason", sa.String(128), nullable=True),
        sa.Column("attempt_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("attempts", _json(), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
        sa.Column("updated_at", _ts(), nullable=False),
        sa.Column("started_at", _ts(), nullable=True),
        sa.Column("completed_at", _ts(), nullable=True),
        sa.Column("failed_at", _ts(), nullable=True),
        sa.Column("cancelled_at", _ts(), nullable=True),
        sa.Column("cancel_reason", sa.Text(), nullable=True),
        sa.Column("next_attempt_at", _ts(), nullable=True),
        sa.Column("lease_expires_at", _ts(), nullable=True),
        sa.Column("claim_token", sa.String(64), nullable=True),
        sa.Column("due_at", _ts(), nullable=True),
        sa.CheckConstraint(
            "status IN ('PENDING', 'PROCESSING', 'COMPLETED', 'FAILED', 'CANCELLED')",
            name=op.f("ck_async_jobs_status"),
        ),
        sa.CheckConstraint(
            "job_type IN ('CARD_ANALYSIS', 'TIL_GENERATION', 'RECALL_GENERATION')",
            name=op.f("ck_async_jobs_job_type"),
        ),
        sa.CheckConstraint("attempt_count >= 0", name=op.f("ck_async_jobs_attempt_count")),
        sa.CheckConstraint("max_attempts >= 1", name=op.f("ck_async_jobs_max_attempts")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_async_jobs")),
    )
    op.create_index(
        "uq_async_jobs_active_target",
        "async_jobs",
        ["job_type", "target_id"],
        unique=True,
        sqlite_where=sa.text(ACTIVE),
        postgresql_where=sa.text(ACTIVE),
    )
    op.create_index("uq_async_jobs_request_id", "async_jobs", ["request_id"], unique=True)
    op.create_index(
        "ix_async_jobs_due",
        "async_jobs",
        ["due_at"],
        sqlite_where=sa.text(ACTIVE),
        postgresql_where=sa.text(ACTIVE),
    )
    op.create_index("ix_async_jobs_status_failed_at", "async_jobs", ["status", "failed_at"])
    op.create_index("ix_async_jobs_created_at_id", "async_jobs", ["created_at", "id"])
    op.create_index("ix_async_jobs_target_id", "async_jobs", ["target_id"])


def downgrade() -> None:
    op.drop_table("async_jobs")
