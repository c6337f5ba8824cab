"""Column api_tokens.expires_at: when a token stops working by itself (`job-service
tokens create NAME --role ROLE --expires-in 90d`); NULL: never, as every token made
before this revision.

Nullable, no default: on PostgreSQL `ADD COLUMN ... NULL` changes only the catalog
(no table rewrite), so it is safe while old instances run. They never name the
column, so they accept an expired token until it is revoked: deploy the new version
everywhere before relying on expiry (README "Bearer tokens").

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Old instances run unchanged beside it (san_jobs.job_service.storage.schema_version).
expand_only = True


def upgrade() -> None:
    op.add_column("api_tokens", sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("api_tokens", "expires_at")
