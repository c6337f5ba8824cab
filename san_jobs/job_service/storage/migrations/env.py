"""Alembic environment for `async_jobs`: async URLs on SQLite and PostgreSQL.

Run programmatically by san_jobs.job_service.storage.migrate (which hands over a connection in
`config.attributes["connection"]`), or by the alembic CLI with `sqlalchemy.url` set.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from san_jobs.job_service.storage.engine import create_engine
from san_jobs.job_service.storage.schema_version import on_version_apply
from san_jobs.job_service.storage.tables import metadata

config = context.config
target_metadata = metadata


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        # SQLite cannot ALTER most things: future migrations copy the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        # One transaction per revision, so a revision can use autocommit_block() and
        # holds no lock of the ones before it (san_jobs.job_service.storage.migrate).
        transaction_per_migration=True,
        on_version_apply=on_version_apply,
    )


def _run(connection: Connection) -> None:
    _configure(connection)
    with context.begin_transaction():
        context.run_migrations()


async def _run_async(url: str) -> None:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            await conn.run_sync(_run)
            await conn.commit()
    finally:
        await engine.dispose()


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.attributes.get("database_url") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no database URL: set sqlalchemy.url or pass a connection")
    asyncio.run(_run_async(str(url)))


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
