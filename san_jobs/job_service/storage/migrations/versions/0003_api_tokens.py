"""Table api_tokens: the bearer tokens of JobService callers (--auth token).

Only a token's SHA-256 is stored; its name is the caller's identity. At most one live
(not revoked) token per name.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# A new table only: code of the revision before runs unchanged beside it
# (san_jobs.job_service.storage.schema_version).
expand_only = True

LIVE_TOKEN = "revoked_at IS NULL"


def _ts() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
        sa.Column("revoked_at", _ts(), nullable=True),
        sa.CheckConstraint(
            "role IN ('submitter', 'viewer', 'operator')", name=op.f("ck_api_tokens_role")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
    )
    op.create_index("uq_api_tokens_token_hash", "api_tokens", ["token_hash"], unique=True)
    op.create_index(
        "uq_api_tokens_live_name",
        "api_tokens",
        ["name"],
        unique=True,
        sqlite_where=sa.text(LIVE_TOKEN),
        postgresql_where=sa.text(LIVE_TOKEN),
    )


def downgrade() -> None:
    op.drop_index("uq_api_tokens_live_name", table_name="api_tokens")
    op.drop_index("uq_api_tokens_token_hash", table_name="api_tokens")
    op.drop_table("api_tokens")
