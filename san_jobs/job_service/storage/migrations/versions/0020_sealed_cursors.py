"""The change feed's key for a submitter's cursors (issue 42, point 13):
job_change_feed.cursor_key, 64 random bytes (hex), made here once per database.

A stream kept to one caller's jobs (a submitter's under --auth token) is given
cursors that carry its position sealed with this key (AES-SIV, the caller's name as
associated data; domain/changes.py): a plain `<feed>.<position>` told the submitter
how many changes other tenants made between two of its own. Every instance reads the
key from the feed's row, so a cursor one instance gave resumes on any other. An
unfiltered reader (an operator or viewer, or --auth off) sees every change and keeps
the plain cursors.

Nullable with no default: on PostgreSQL a change of the catalog, on SQLite an ALTER
TABLE ADD COLUMN (no rebuild), then the one row is given its key. Old instances never
read it: during a rolling upgrade a submitter's stream resumed on an old instance with
a sealed cursor is refused as malformed, and a new instance accepts an old one's plain
cursor only where it stands at that caller's own change or at the oldest kept
position (what the old instance gave a submitter), so resuming there goes on.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07
"""

import secrets
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
expand_only = True


def upgrade() -> None:
    op.add_column("job_change_feed", sa.Column("cursor_key", sa.String(128), nullable=True))
    op.execute(
        sa.text("UPDATE job_change_feed SET cursor_key = :key").bindparams(
            key=secrets.token_hex(64)
        )
    )


def downgrade() -> None:
    op.drop_column("job_change_feed", "cursor_key")
