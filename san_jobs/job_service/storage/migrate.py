"""Apply the alembic migrations in code (no alembic.ini needed at runtime), safely
beside running instances.

python -m san_jobs.job_service.storage.migrate DATABASE_URL

- Each revision commits in its own transaction (alembic's transaction_per_migration),
  so a long migration never holds the locks of the ones before it, and a revision
  may leave its transaction with `op.get_context().autocommit_block()` for
  `CREATE INDEX CONCURRENTLY` or a `VALIDATE CONSTRAINT` of its own.
- PostgreSQL: `lock_timeout` (LOCK_TIMEOUT_SECONDS) on the migrating connection. A DDL
  statement queued behind a busy table's traffic would otherwise make every later
  statement on that table queue behind *it*; instead it gives up, the revision rolls
  back (revisions before it stay committed) and is tried again a few times. If it
  still cannot get its lock, MigrationLockTimeout says to run `job-service migrate`
  again. A revision with an autocommit block has committed what came before the block,
  so it must run again from its start unharmed (IF NOT EXISTS, DROP ... IF EXISTS).
- PostgreSQL: a session advisory lock (pg_advisory_lock on a connection of its own,
  held from the first revision to the last), so concurrent `migrate` runs take turns
  across the per-revision commits. SQLite has one writer at a time anyway.
- After each revision (in its transaction) the table schema_compatibility records
  which code may run on the schema (storage/schema_version.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import URL, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from san_jobs.job_service.domain.errors import StorageUnavailableError
from san_jobs.job_service.storage import schema_version
from san_jobs.job_service.storage.engine import create_engine, normalize_url
from san_jobs.job_service.storage.errors import sqlstate, storage_errors

if TYPE_CHECKING:
    from alembic.config import Config

log = logging.getLogger("job_service.migrate")

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
# Any constant: instances starting together on one PostgreSQL take turns migrating.
_PG_LOCK_KEY = 0x5A4E_4A0B
# Long enough for the short transactions of running instances to end, short enough
# that their traffic does not stall behind a waiting ALTER for noticeably long.
LOCK_TIMEOUT_SECONDS = 5.0
LOCK_ATTEMPTS = 3
_LOCK_NOT_AVAILABLE = "55P03"
_LOCK_POLL_SECONDS = 0.2


class MigrationLockTimeout(StorageUnavailableError):
    """A revision could not get its lock within lock_timeout, LOCK_ATTEMPTS times."""


class SchemaTooNew(schema_version.SchemaMismatch):
    """The database is at a revision this code does not know: nothing to migrate here."""


def alembic_config(database_url: str | URL | None = None) -> Config:
    # alembic is imported only to migrate: a start on a schema at head never is.
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if database_url is not None:
        config.attributes["database_url"] = normalize_url(database_url).render_as_string(
            hide_password=False
        )
    return config


def _pending_revision(connection: Connection) -> str:
    heads = schema_version.read_schema(connection).revisions
    return heads[0] if len(heads) == 1 else ",".join(heads) or "the first"


def _upgrade(connection: Connection, revision: str, lock_timeout: float) -> None:
    from alembic import command

    pg = connection.dialect.name == "postgresql"
    if pg:
        # Session level: it outlives each revision's commit and the autocommit blocks.
        connection.execute(text(f"SET lock_timeout = {int(lock_timeout * 1000)}"))
    connection.commit()
    schema = schema_version.read_schema(connection)
    connection.commit()
    unknown = [r for r in schema.revisions if r not in schema_version.code_revisions()]
    if unknown:
        raise SchemaTooNew(
            f"the database schema is at revision {','.join(unknown)}, newer than this "
            f"job-service knows (its newest is {schema_version.code_head()}): nothing to "
            "migrate with this version"
        )
    for attempt in range(1, LOCK_ATTEMPTS + 1):
        config = alembic_config()
        config.attributes["connection"] = connection
        try:
            command.upgrade(config, revision)
            break
        except Exception as error:
            if not pg or sqlstate(error) != _LOCK_NOT_AVAILABLE:
                raise
            connection.rollback()
            stuck = _pending_revision(connection)
            connection.commit()
            if attempt == LOCK_ATTEMPTS:
                raise MigrationLockTimeout(
                    f"the migration after revision {stuck} waited {lock_timeout:g}s for a "
                    f"table lock {LOCK_ATTEMPTS} times (lock_timeout) while other sessions "
                    "used the table; the revisions before it are applied: run `job-service "
                    "migrate` again (safe to re-run), at a quieter moment or after ending "
                    "long transactions"
                ) from None
            log.warning(
                "migration after revision %s: lock not granted in %gs (attempt %d of %d), "
                "trying again",
                stuck,
                lock_timeout,
                attempt,
                LOCK_ATTEMPTS,
            )
    # Also for a database migrated before the table existed: record where it is.
    current = schema_version.read_schema(connection).revisions
    schema_version.record_compatibility(connection, current[0] if len(current) == 1 else None)
    connection.commit()


async def _advisory_lock(conn: AsyncConnection) -> None:
    """Take the session advisory lock, polling: a session waiting in pg_advisory_lock()
    holds a snapshot all the while, and CREATE INDEX CONCURRENTLY in the migration it
    waits for would wait for that snapshot to go (until its lock_timeout)."""
    waiting = False
    while True:
        taken = await conn.scalar(text("SELECT pg_try_advisory_lock(:k)"), {"k": _PG_LOCK_KEY})
        await conn.commit()  # a session lock: held past the commit, until unlocked
        if taken:
            return
        if not waiting:
            log.info("another migration is running; waiting for it to end")
            waiting = True
        await asyncio.sleep(_LOCK_POLL_SECONDS)


async def _advisory_unlock(conn: AsyncConnection) -> None:
    await conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _PG_LOCK_KEY})
    await conn.commit()


async def migrate(
    database_url: str | URL,
    revision: str = "head",
    *,
    lock_timeout: float = LOCK_TIMEOUT_SECONDS,
) -> None:
    """Bring the database at `database_url` to `revision` (default: the latest)."""
    engine = create_engine(database_url)
    pg = engine.dialect.name == "postgresql"
    try:
        with storage_errors():
            async with contextlib.AsyncExitStack() as stack:
                if pg:
                    lock_conn = await stack.enter_async_context(engine.connect())
                    await _advisory_lock(lock_conn)
                    stack.push_async_callback(_advisory_unlock, lock_conn)
                async with engine.connect() as conn:
                    await conn.run_sync(_upgrade, revision, lock_timeout)
    finally:
        await engine.dispose()


def migrate_sync(database_url: str | URL, revision: str = "head") -> None:
    """migrate() for callers without an event loop (CLI, scripts)."""
    asyncio.run(migrate(database_url, revision))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m san_jobs.job_service.storage.migrate DATABASE_URL", file=sys.stderr)
        return 2
    migrate_sync(args[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
