"""Apply the alembic migrations in code (no alembic.ini needed at runtime).

python -m job_service.storage.migrate DATABASE_URL
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import URL, text
from sqlalchemy.engine import Connection

from job_service.storage.engine import create_engine, normalize_url
from job_service.storage.errors import storage_errors

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
# Any constant: instances starting together on one PostgreSQL take turns migrating.
_PG_LOCK_KEY = 0x5A4E_4A0B


def alembic_config(database_url: str | URL | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if database_url is not None:
        config.attributes["database_url"] = normalize_url(database_url).render_as_string(
            hide_password=False
        )
    return config


def _upgrade(connection: Connection, revision: str) -> None:
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
    config = alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, revision)


async def migrate(database_url: str | URL, revision: str = "head") -> None:
    """Bring the database at `database_url` to `revision` (default: the latest)."""
    engine = create_engine(database_url)
    try:
        with storage_errors():
            async with engine.begin() as conn:
                await conn.run_sync(_upgrade, revision)
    finally:
        await engine.dispose()


def migrate_sync(database_url: str | URL, revision: str = "head") -> None:
    """migrate() for callers without an event loop (CLI, scripts)."""
    asyncio.run(migrate(database_url, revision))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m job_service.storage.migrate DATABASE_URL", file=sys.stderr)
        return 2
    migrate_sync(args[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
