"""Table dispatch_limits: the shared token bucket of each rate-limited job type.

One row per job type with a --rate-limit, created by the first claim of that type; a
claim of the type locks its row, so instances take turns (domain/claim_limits.py).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# A new table only: code of the revision before runs unchanged beside it
# (san_jobs.job_service.storage.schema_version).
expand_only = True


def upgrade() -> None:
    op.create_table(
        "dispatch_limits",
        sa.Column("job_type", sa.String(32), nullable=False),
        sa.Column("tokens", sa.Float(), nullable=False),
        sa.Column("refilled_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("job_type", name=op.f("pk_dispatch_limits")),
    )


def downgrade() -> None:
    op.drop_table("dispatch_limits")
