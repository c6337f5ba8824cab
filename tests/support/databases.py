"""Throwaway databases for tests: a fresh PostgreSQL database per caller, and the
rule for when PostgreSQL is missing (skip locally, fail under CI: tests.support.ci).

    url = create_temp_postgres_database()          # migrated, ready for job-service
    ...
    drop_database(url)

Async twins: `create_temp_postgres_database_async`, `drop_database_async`. The sync
functions run their work on a private thread, so they work inside a running loop too.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import hashlib
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy import URL, make_url

from san_jobs.job_service.storage.migrate import MIGRATIONS_DIR, migrate
from san_jobs.job_service.storage.notify import asyncpg_dsn
from tests.support.ci import running_in_ci

T = TypeVar("T")

DEFAULT_POSTGRES_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"


def postgres_base_url() -> str:
    return os.environ.get("SAN_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)


def run_sync(factory: Callable[[], Awaitable[T]]) -> T:
    """Run `factory()` to completion on a fresh loop in a private thread."""

    async def runner() -> T:
        return await factory()

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, runner()).result()


def _maintenance_dsn(url: str) -> str:
    return asyncpg_dsn(make_url(url).set(database="postgres"))


async def postgres_unreachable_reason(url: str | None = None) -> str | None:
    """None if PostgreSQL answers at `url`, else why not."""
    url = url or postgres_base_url()
    try:
        conn = await asyncpg.connect(_maintenance_dsn(url), timeout=3)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
        shown = make_url(url).render_as_string(hide_password=True)
        return f"PostgreSQL unreachable at {shown}: {type(exc).__name__}: {exc}"
    await conn.close()
    return None


# One migrated database per schema, made once and copied (CREATE DATABASE ... TEMPLATE)
# for every test that wants a migrated one: a copy costs tens of milliseconds, running
# the migrations about a second. Its name carries a digest of the migrations, so a
# changed migration makes a new template; parallel test processes make it once between
# them (an advisory lock), and nobody stays connected to it (a template must be idle).
# Templates of older schemas are left in place: another checkout may be using one.
_TEMPLATE_LOCK = 0x5A4E_7E57  # pg_advisory_lock key: "san test" template


def _schema_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted(MIGRATIONS_DIR.rglob("*.py")):
        digest.update(path.relative_to(MIGRATIONS_DIR).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


async def _migrated_template(maintenance: asyncpg.Connection, base: URL) -> str:
    name = f"san_template_{_schema_digest()}"
    await maintenance.execute("SELECT pg_advisory_lock($1)", _TEMPLATE_LOCK)
    try:
        if await maintenance.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
            return name
        building = f"{name}_building"  # renamed only once migrated: never half a template
        await maintenance.execute(f'DROP DATABASE IF EXISTS "{building}" WITH (FORCE)')
        await maintenance.execute(f'CREATE DATABASE "{building}"')
        await migrate(base.set(database=building).render_as_string(hide_password=False))
        await maintenance.execute(f'ALTER DATABASE "{building}" RENAME TO "{name}"')
        return name
    finally:
        await maintenance.execute("SELECT pg_advisory_unlock($1)", _TEMPLATE_LOCK)


# The SQLite twin: one migrated file per test process, copied for each test that
# wants a migrated SQLite database (the integration fixtures) and for each job-service
# process started on a file of its own (tests/support/processes.py): a copy costs a
# millisecond, migrating about a fifth of a second of CPU. The tests of migrating at a
# start give their own URL.
_sqlite_template: Path | None = None


def put_migrated_sqlite_file(path: Path) -> None:
    """Make `path` (not there yet) a SQLite database at the latest schema, 0600 as
    job-service makes its own files (san_jobs/shared/sqlite_files.py)."""
    global _sqlite_template
    if _sqlite_template is None:
        folder = Path(tempfile.mkdtemp(prefix="san-sqlite-template-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        template = folder / "jobs.db"
        run_sync(lambda: migrate(f"sqlite+aiosqlite:///{template}"))
        _sqlite_template = template
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as copy:
        copy.write(_sqlite_template.read_bytes())


async def create_temp_postgres_database_async(
    base_url: str | None = None, *, migrated: bool = True
) -> str:
    """CREATE DATABASE san_test_<random> next to `base_url`; returns its SQLAlchemy URL
    (postgresql+asyncpg://...). Migrated to the latest schema (a copy of the migrated
    template) unless `migrated=False`."""
    base = make_url(base_url or postgres_base_url()).set(drivername="postgresql+asyncpg")
    name = f"san_test_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(_maintenance_dsn(base.render_as_string(False)), timeout=10)
    try:
        if migrated:
            template = await _migrated_template(conn, base)
            await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        else:
            await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return base.set(database=name).render_as_string(hide_password=False)


# DROP DATABASE makes PostgreSQL run a checkpoint and wait for it. One drop at each
# test's end cost the suite about 500 checkpoints (and after each one, every page
# written goes to the WAL whole again). So a test's database is dropped together with
# others, at once, when DROP_GROUP of them wait (the rest when the test process ends):
# drops at once share a checkpoint. Measured here: 16 drops one by one, 16 checkpoints
# in 2.6 s; the same 16 at once, 2 checkpoints in 0.3 s.
DROP_GROUP = 8
_waiting_drops: list[str] = []
_drops_lock = threading.Lock()


async def drop_database_async(url: str) -> None:
    """DROP DATABASE (FORCE: ends leftover sessions) for a URL made above, with the
    next group of drops (DROP_GROUP)."""
    _test_database_name(url)  # refused at once, not later with the group
    with _drops_lock:
        _waiting_drops.append(url)
        if len(_waiting_drops) < DROP_GROUP:
            return
        group = list(_waiting_drops)
        _waiting_drops.clear()
    await _drop_at_once(group)


def _test_database_name(url: str) -> str:
    name = make_url(url).database
    if not name or not name.startswith("san_test_"):
        raise ValueError(f"refusing to drop {name!r}: not a test database")
    return name


async def _drop_at_once(urls: list[str]) -> None:
    async def drop(url: str) -> None:
        conn = await asyncpg.connect(_maintenance_dsn(url), timeout=10)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{_test_database_name(url)}" WITH (FORCE)')
        finally:
            await conn.close()

    await asyncio.gather(*(drop(url) for url in urls))


@atexit.register
def _drop_the_waiting() -> None:
    # At exit, on this thread: the interpreter no longer starts threads for run_sync.
    with _drops_lock:
        group = list(_waiting_drops)
        _waiting_drops.clear()
    if group:
        asyncio.run(_drop_at_once(group))


def create_temp_postgres_database(base_url: str | None = None, *, migrated: bool = True) -> str:
    return run_sync(lambda: create_temp_postgres_database_async(base_url, migrated=migrated))


def drop_database(url: str) -> None:
    run_sync(lambda: drop_database_async(url))


def drop_database_now(url: str) -> None:
    """DROP DATABASE at once, not with a group: for a test whose database must be gone
    before its next step (the database-down cases)."""
    run_sync(lambda: _drop_at_once([url]))


def require_postgres(url: str | None = None) -> str | None:
    """None if PostgreSQL is reachable; else the reason (callers skip with it). Under
    CI (tests.support.ci) an unreachable server is an error, never a skip."""
    reason = run_sync(lambda: postgres_unreachable_reason(url))
    if reason is not None and running_in_ci():
        raise RuntimeError(f"{reason}; CI requires it")
    return reason
