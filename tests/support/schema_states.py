"""Databases at schema states a test cannot reach by migrating: the revision a later
release would leave (storage/schema_version.py)."""

from __future__ import annotations

from sqlalchemy import text

from san_jobs.job_service.storage.engine import create_engine

FUTURE = "9999"  # a revision only a newer version of the code would know


async def execute(url: str, *statements: str) -> None:
    """Run `statements` in one transaction."""
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            for statement in statements:
                await conn.execute(text(statement))
    finally:
        await engine.dispose()


async def pretend_a_newer_version_migrated(url: str, compatible_from: str | None) -> None:
    """What a later release's `job-service migrate` leaves on a database at this code's
    head: a revision this code does not know, and (unless None) the record of the
    oldest revision whose code may run on it."""
    statements = [f"UPDATE alembic_version SET version_num = '{FUTURE}'"]
    if compatible_from is None:
        statements.append("DELETE FROM schema_compatibility")
    else:
        statements.append(
            f"UPDATE schema_compatibility SET revision = '{FUTURE}', "
            f"compatible_from = '{compatible_from}'"
        )
    await execute(url, *statements)
