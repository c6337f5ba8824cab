"""The inbox tables ``san_jobs_inbox`` and ``san_jobs_inbox_parked``: their SQLAlchemy
definitions, their DDL, their migration.

They live in the *application's* database, next to the rows its handler writes, so
that a change's effect and the consumer's new cursor commit in one transaction. As the
outbox's table, they serve SQLite and PostgreSQL alike: times are naive UTC
``DateTime`` values written by the SDK, not server defaults.

``san_jobs_inbox`` holds one row per consumer: where it is in JobService's change feed
(``cursor``, "" before its first change), which instance holds its lease and until
when, and the last error it met. ``san_jobs_inbox_parked`` holds the changes whose
handler kept failing, each with the job as it came (a serialized ``Job``), for the
operator to look at and replay.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
)
from sqlalchemy.ext.asyncio import AsyncConnection

INBOX_TABLE_NAME = "san_jobs_inbox"
INBOX_PARKED_TABLE_NAME = "san_jobs_inbox_parked"


def inbox_tables(metadata: MetaData) -> tuple[Table, Table]:
    """(``san_jobs_inbox``, ``san_jobs_inbox_parked``) in ``metadata`` (defined there
    once, then reused)."""
    inbox = metadata.tables.get(INBOX_TABLE_NAME)
    if inbox is None:
        inbox = Table(
            INBOX_TABLE_NAME,
            metadata,
            Column("consumer", String(128), primary_key=True),
            # The last cursor whose change (or progress mark) was applied; "" = none yet.
            Column("cursor", String(256), nullable=False, server_default=""),
            Column("lease_owner", String(64), nullable=True),
            Column("lease_until", DateTime(), nullable=True),
            Column("updated_at", DateTime(), nullable=False),
            Column("last_error", Text, nullable=True),
        )
    parked = metadata.tables.get(INBOX_PARKED_TABLE_NAME)
    if parked is None:
        parked = Table(
            INBOX_PARKED_TABLE_NAME,
            metadata,
            Column(
                "id",
                BigInteger().with_variant(Integer, "sqlite"),
                primary_key=True,
                autoincrement=True,
            ),
            Column("consumer", String(128), nullable=False),
            Column("cursor", String(256), nullable=False),
            Column("job_id", String(36), nullable=False),
            Column("job", LargeBinary, nullable=False),  # the serialized Job
            Column("error", Text, nullable=False),
            Column("failures", Integer, nullable=False),
            Column("parked_at", DateTime(), nullable=False),
            Index("ix_san_jobs_inbox_parked_consumer", "consumer", "id"),
        )
    return inbox, parked


async def create_inbox_tables(conn: AsyncConnection) -> None:
    """Create ``san_jobs_inbox`` and ``san_jobs_inbox_parked`` if they are missing
    (idempotent). For applications without migrations; with Alembic, use
    :data:`INBOX_MIGRATION`."""
    metadata = MetaData()
    inbox_tables(metadata)
    await conn.run_sync(lambda sync_conn: metadata.create_all(sync_conn, checkfirst=True))


INBOX_MIGRATION = '''\
"""Add san_jobs_inbox and san_jobs_inbox_parked, the SAN Jobs SDK's transactional inbox."""

import sqlalchemy as sa
from alembic import op


def upgrade() -> None:
    op.create_table(
        "san_jobs_inbox",
        sa.Column("consumer", sa.String(128), primary_key=True),
        sa.Column("cursor", sa.String(256), nullable=False, server_default=""),
        sa.Column("lease_owner", sa.String(64), nullable=True),
        sa.Column("lease_until", sa.DateTime(), nullable=True),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
    )
    op.create_table(
        "san_jobs_inbox_parked",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("consumer", sa.String(128), nullable=False),
        sa.Column("cursor", sa.String(256), nullable=False),
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("job", sa.LargeBinary(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("parked_at", sa.DateTime(), nullable=False),
    )
    op.create_index(
        "ix_san_jobs_inbox_parked_consumer", "san_jobs_inbox_parked", ["consumer", "id"]
    )


def downgrade() -> None:
    op.drop_table("san_jobs_inbox_parked")
    op.drop_table("san_jobs_inbox")
'''
"""An Alembic-ready migration body (``upgrade``/``downgrade``) creating the same tables
as :func:`create_inbox_tables`; paste it into a revision file of the application."""
