"""The outbox table's DDL ships with the SDK: the function and the Alembic snippet
build the same table, and the function may run at every start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.ext.asyncio import create_async_engine

from san_jobs.client.outbox import OUTBOX_MIGRATION, create_outbox_table, outbox_table


def shape(conn: sa.Connection) -> dict[str, Any]:
    inspector = sa.inspect(conn)
    columns = {
        c["name"]: (type(c["type"]).__name__, c["nullable"])
        for c in inspector.get_columns("san_jobs_outbox")
    }
    indexes = {i["name"] for i in inspector.get_indexes("san_jobs_outbox")}
    return {"columns": columns, "indexes": indexes}


def test_outbox_table_is_defined_once_per_metadata() -> None:
    metadata = sa.MetaData()
    assert outbox_table(metadata) is outbox_table(metadata)
    assert outbox_table(metadata).name == "san_jobs_outbox"


async def test_create_outbox_table_is_idempotent(tmp_path: Path) -> None:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'app.db'}")
    try:
        for _ in range(2):
            async with engine.begin() as conn:
                await create_outbox_table(conn)
        async with engine.connect() as conn:
            created = await conn.run_sync(shape)
    finally:
        await engine.dispose()
    assert {"id", "seq", "state", "job_id", "error", "attempts"} <= set(created["columns"])
    assert {"ix_san_jobs_outbox_queued", "ix_san_jobs_outbox_settled"} <= created["indexes"]


def test_the_alembic_snippet_builds_the_same_table(tmp_path: Path) -> None:
    functions = sa.create_engine(f"sqlite:///{tmp_path / 'by_function.db'}")
    migrated = sa.create_engine(f"sqlite:///{tmp_path / 'by_migration.db'}")
    try:
        with functions.begin() as conn:
            outbox_table(sa.MetaData()).create(conn)
            expected = shape(conn)
        namespace: dict[str, Any] = {}
        exec(compile(OUTBOX_MIGRATION, "outbox_migration", "exec"), namespace)
        with migrated.begin() as conn, Operations.context(MigrationContext.configure(conn)):
            namespace["upgrade"]()
            assert shape(conn) == expected
            namespace["downgrade"]()
            assert not sa.inspect(conn).has_table("san_jobs_outbox")
    finally:
        functions.dispose()
        migrated.dispose()
