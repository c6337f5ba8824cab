"""Optional expiry of API tokens (placeholder: filled in by the token-expiry work)

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from collections.abc import Sequence

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Old instances run unchanged beside it (job_service.storage.schema_version).
expand_only = True


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
