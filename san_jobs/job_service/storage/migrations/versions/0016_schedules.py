"""Schedules (CreateSchedule and the rest): table job_schedules, one row per
(tenant, schedule_id); the firing loop reads ix_job_schedules_next_fire_at for the
earliest due schedule, and ListSchedules ix_job_schedules_schedule_id.

A new table only: old instances never read it, so they run unchanged beside it.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Old instances run unchanged beside it (san_jobs.job_service.storage.schema_version).
expand_only = True


def _time() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    json_type = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
    op.create_table(
        "job_schedules",
        sa.Column("tenant", sa.String(256), nullable=False),
        sa.Column("schedule_id", sa.String(128), nullable=False),
        sa.Column("requested_by", sa.String(256), nullable=False),
        sa.Column("definition", json_type, nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("next_fire_at", _time(), nullable=False),
        sa.Column("last_fire_at", _time(), nullable=True),
        sa.Column("last_job_id", sa.String(36), nullable=True),
        sa.Column("skipped_count", sa.BigInteger(), nullable=False),
        sa.Column("created_at", _time(), nullable=False),
        sa.Column("updated_at", _time(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "schedule_id", name="pk_job_schedules"),
    )
    op.create_index("ix_job_schedules_next_fire_at", "job_schedules", ["next_fire_at"])
    op.create_index("ix_job_schedules_schedule_id", "job_schedules", ["schedule_id"])


def downgrade() -> None:
    op.drop_table("job_schedules")
