"""A CHECK ties due_at to the status: one rule, held by the database.

due_at (when the worker next looks at a job) is derived from the row: a PENDING job
is due at its retry time, else when it last changed; a PROCESSING job when its lease
runs out; a terminal job never (san_jobs.job_service.domain.transitions.due_at). Every write
now derives it from that one rule; the CHECK ck_async_jobs_due_at makes a write that
breaks it fail instead of hiding a job from the claim query or waking the worker for
nothing.

Rows that break the rule are repaired first (due_at set to the derived value), so the
CHECK can be added. On PostgreSQL the CHECK is added NOT VALID and then validated in
a transaction of its own (a full scan that takes a SHARE UPDATE EXCLUSIVE lock, not
ACCESS EXCLUSIVE); SQLite rebuilds the table (batch mode).

The SQL is written out here, not imported: a migration must not change when the code
does (a test checks it equals DUE_AT_CHECK_SQL today).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NAME = "ck_async_jobs_due_at"

# Null-safe: SQL's CHECK passes on NULL, so each branch says IS NOT NULL first.
DUE_AT_RULE = (
    "CASE status"
    " WHEN 'PENDING' THEN due_at IS NOT NULL"
    " AND due_at = COALESCE(next_attempt_at, updated_at)"
    " WHEN 'PROCESSING' THEN due_at IS NOT NULL AND lease_expires_at IS NOT NULL"
    " AND due_at = lease_expires_at"
    " ELSE due_at IS NULL END"
)

DERIVED_DUE_AT = (
    "CASE status"
    " WHEN 'PENDING' THEN COALESCE(next_attempt_at, updated_at)"
    " WHEN 'PROCESSING' THEN lease_expires_at"
    " ELSE NULL END"
)

# The rule never yields NULL (each branch is a plain boolean), so NOT finds every
# row that breaks it.
REPAIR = f"UPDATE async_jobs SET due_at = {DERIVED_DUE_AT} WHERE NOT ({DUE_AT_RULE})"


def upgrade() -> None:
    op.execute(REPAIR)
    if op.get_bind().dialect.name == "postgresql":
        # Dropped first so that a run stopped after this commit (lock_timeout) can be
        # run again; the brief ACCESS EXCLUSIVE lock of the ALTER ends with the commit.
        op.execute(
            f"ALTER TABLE async_jobs DROP CONSTRAINT IF EXISTS {NAME},"
            f" ADD CONSTRAINT {NAME} CHECK ({DUE_AT_RULE}) NOT VALID"
        )
        # Its own transaction: the scan holds SHARE UPDATE EXCLUSIVE only, which lets
        # running instances read and write the table meanwhile. (Before the runner
        # committed each revision apart, this ran in the ADD's transaction, holding
        # ACCESS EXCLUSIVE through the scan; the schema it leaves is the same.)
        with op.get_context().autocommit_block():
            op.execute(f"ALTER TABLE async_jobs VALIDATE CONSTRAINT {NAME}")
        return
    with op.batch_alter_table("async_jobs") as batch:  # SQLite rebuilds the table for it
        batch.create_check_constraint(op.f(NAME), DUE_AT_RULE)


def downgrade() -> None:
    with op.batch_alter_table("async_jobs") as batch:
        batch.drop_constraint(op.f(NAME), type_="check")
