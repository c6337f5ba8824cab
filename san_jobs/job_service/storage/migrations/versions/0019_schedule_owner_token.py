"""The token that owns each schedule (issue 42, point 6): job_schedules.owner_token_id,
the api_tokens.id of the token its tenant authenticated with when it was created.

A schedule fires only while that token is live (not revoked, not expired); a token
made again under the same name is another row, another id, so it does not inherit
the old token's schedules (ResumeSchedule, by the new token or an operator, takes
them over deliberately). NULL: no token owns it (--auth off, a client certificate):
it fires as before.

The schedules stored before this version are given the token of their tenant's
name that was the newest when the schedule was created (the one that created it);
none of that name: NULL. Nullable with no default: on PostgreSQL a change of the
catalog, on SQLite an ALTER TABLE ADD COLUMN (no rebuild). An old instance never
writes it: a schedule it creates during a rolling upgrade is owned by no token (it
fires whatever becomes of its owner's token) until it is deleted and created again.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
expand_only = True


def upgrade() -> None:
    op.add_column("job_schedules", sa.Column("owner_token_id", sa.String(36), nullable=True))
    op.execute(
        "UPDATE job_schedules SET owner_token_id = ("
        " SELECT t.id FROM api_tokens t"
        " WHERE t.name = job_schedules.tenant AND t.created_at <= job_schedules.created_at"
        " ORDER BY t.created_at DESC LIMIT 1"
        ") WHERE tenant <> ''"
    )


def downgrade() -> None:
    op.drop_column("job_schedules", "owner_token_id")
