"""Table dispatch_pauses: the job types paused (circuit open, rate-limited).

One row per paused job type, read by every instance about once a second, so a pause
one instance opens stops them all (san_jobs/job_service/domain/dispatch.py).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# A new table only: code of the revision before runs unchanged beside it
# (san_jobs.job_service.storage.schema_version).
expand_only = True


def _ts() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "dispatch_pauses",
        sa.Column("job_type", sa.String(32), nullable=False),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("since", _ts(), nullable=False),
        sa.Column("until", _ts(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.Column("opened_by", sa.String(200), nullable=False),
        sa.CheckConstraint(
            "reason IN ('CIRCUIT_OPEN', 'RATE_LIMITED')", name=op.f("ck_dispatch_pauses_reason")
        ),
        sa.PrimaryKeyConstraint("job_type", name=op.f("pk_dispatch_pauses")),
    )


def downgrade() -> None:
    op.drop_table("dispatch_pauses")
