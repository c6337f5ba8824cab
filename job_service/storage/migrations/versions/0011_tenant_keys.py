"""Keys scoped to the tenant (placeholder: filled in by the tenant-keys work)

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

from collections.abc import Sequence

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Old instances run unchanged beside it (job_service.storage.schema_version).
expand_only = True


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
