"""The outbox table ``san_jobs_outbox``: its SQLAlchemy definition, its DDL, its migration.

The table lives in the *application's* database, next to its business rows, so that
both are written in one transaction. It serves SQLite and PostgreSQL alike: times are
naive UTC ``DateTime`` values written by the relay (not server defaults, whose text
format differs between the two), and ``seq`` is the order rows were added in.
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
    text,
)
from sqlalchemy.ext.asyncio import AsyncConnection

OUTBOX_TABLE_NAME = "san_jobs_outbox"

# States of a row; only "queued" rows are ever sent.
QUEUED = "queued"
DELIVERED = "delivered"
REFUSED = "refused"

_QUEUED_SQL = "state = 'queued'"


def outbox_table(metadata: MetaData) -> Table:
    """The ``san_jobs_outbox`` table in ``metadata`` (defined there once, then reused)."""
    existing = metadata.tables.get(OUTBOX_TABLE_NAME)
    if existing is not None:
        return existing
    return Table(
        OUTBOX_TABLE_NAME,
        metadata,
        # The add order; per target, rows are delivered in this order.
        Column(
            "seq",
            BigInteger().with_variant(Integer, "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        # A UUID, also the Enqueue request_id: a repeated delivery returns the same job.
        Column("id", String(36), nullable=False, unique=True),
        Column("job_type", String(64), nullable=False),
        Column("target_id", String(256), nullable=False),
        Column("request", LargeBinary, nullable=False),  # the serialized EnqueueRequest
        Column("state", String(16), nullable=False, server_default=QUEUED),
        Column("job_id", String(36), nullable=True),
        Column("error", Text, nullable=True),
        Column("attempts", Integer, nullable=False, server_default="0"),
        Column("created_at", DateTime(), nullable=False),
        Column("settled_at", DateTime(), nullable=True),  # delivered or refused at
        Column("next_attempt_at", DateTime(), nullable=True),
        Column("lease_owner", String(64), nullable=True),
        Column("lease_until", DateTime(), nullable=True),
        # The relay's claim: queued rows by target, oldest first.
        Index(
            "ix_san_jobs_outbox_queued",
            "job_type",
            "target_id",
            "seq",
            sqlite_where=text(_QUEUED_SQL),
            postgresql_where=text(_QUEUED_SQL),
        ),
        # Pruning: settled rows by age.
        Index("ix_san_jobs_outbox_settled", "settled_at"),
    )


async def create_outbox_table(conn: AsyncConnection) -> None:
    """Create ``san_jobs_outbox`` and its indexes if they are missing (idempotent).

    For applications without migrations; with Alembic, use :data:`OUTBOX_MIGRATION`.
    """
    table = outbox_table(MetaData())
    await conn.run_sync(lambda sync_conn: table.create(sync_conn, checkfirst=True))


OUTBOX_MIGRATION = '''\
"""Add san_jobs_outbox, the SAN Jobs SDK's transactional outbox."""

import sqlalchemy as sa
from alembic import op

QUEUED = sa.text("state = 'queued'")


def upgrade() -> None:
    op.create_table(
        "san_jobs_outbox",
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("id", sa.String(36), nullable=False, unique=True),
        sa.Column("job_type", sa.String(64), nullable=False),
        sa.Column("target_id", sa.String(256), nullable=False),
        sa.Column("request", sa.LargeBinary(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False, server_default="queued"),
        sa.Column("job_id", sa.String(36), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("settled_at", sa.DateTime(), nullable=True),
        sa.Column("next_attempt_at", sa.DateTime(), nullable=True),
        sa.Column("lease_owner", sa.String(64), nullable=True),
        sa.Column("lease_until", sa.DateTime(), nullable=True),
    )
    op.create_index(
        "ix_san_jobs_outbox_queued",
        "san_jobs_outbox",
        ["job_type", "target_id", "seq"],
        sqlite_where=QUEUED,
        postgresql_where=QUEUED,
    )
    op.create_index("ix_san_jobs_outbox_settled", "san_jobs_outbox", ["settled_at"])


def downgrade() -> None:
    op.drop_table("san_jobs_outbox")
'''
"""An Alembic-ready migration body (``upgrade``/``downgrade``) creating the same table
as :func:`create_outbox_table`; paste it into a revision file of the application."""
