"""The migration runner beside running instances (issue 14, point 7): one transaction
per revision, lock_timeout, concurrent runs taking turns, the schema_compatibility
record, and what a start does on an older or newer schema; on SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import importlib
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import event, text

from san_jobs.job_service.storage import schema_version
from san_jobs.job_service.storage.engine import create_engine
from san_jobs.job_service.storage.migrate import MigrationLockTimeout, SchemaTooNew, migrate
from san_jobs.job_service.storage.schema_version import (
    DatabaseSchema,
    SchemaMismatch,
    Verdict,
    code_head,
    code_revisions,
    compatible_from,
    judge,
    prepare_schema,
    read_database_schema,
)
from tests.support.databases import create_temp_postgres_database_async, drop_database_async
from tests.support.schema_states import FUTURE, execute, pretend_a_newer_version_migrated

# The module (san_jobs.job_service.storage.migrate is also the name of its function).
runner = importlib.import_module("san_jobs.job_service.storage.migrate")
HEAD = code_head()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A database with no schema yet."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'jobs.db'}"
        return
    request.getfixturevalue("postgres_server")  # skip (or fail under CI) without one
    url = await create_temp_postgres_database_async(migrated=False)
    yield url
    await drop_database_async(url)


@pytest.fixture
async def empty_pg_url(postgres_server: None) -> AsyncIterator[str]:
    url = await create_temp_postgres_database_async(migrated=False)
    yield url
    await drop_database_async(url)


# -- the rule, on its own ---------------------------------------------------------------


def test_judge_each_kind_of_schema() -> None:
    older = code_revisions()[-2]
    assert judge(DatabaseSchema(())).verdict is Verdict.EMPTY
    assert judge(DatabaseSchema((HEAD,))).verdict is Verdict.CURRENT
    assert judge(DatabaseSchema((older,))).verdict is Verdict.OLDER
    # Newer: only what the database records counts, and only for its own revision.
    assert judge(DatabaseSchema((FUTURE,))).verdict is Verdict.NEWER_INCOMPATIBLE
    assert judge(DatabaseSchema((FUTURE,), FUTURE, HEAD)).verdict is Verdict.NEWER_COMPATIBLE
    assert judge(DatabaseSchema((FUTURE,), FUTURE, older)).verdict is Verdict.NEWER_COMPATIBLE
    assert judge(DatabaseSchema((FUTURE,), FUTURE, FUTURE)).verdict is Verdict.NEWER_INCOMPATIBLE
    assert judge(DatabaseSchema((FUTURE,), HEAD, HEAD)).verdict is Verdict.NEWER_INCOMPATIBLE
    assert judge(DatabaseSchema((FUTURE, "9998"))).verdict is Verdict.NEWER_INCOMPATIBLE


def test_compatible_from_follows_the_expand_only_declarations() -> None:
    # 0005 adds a CHECK older code may break; 0006 and 0007 only add tables.
    assert compatible_from("0005") == "0005"
    assert compatible_from("0006") == "0005"
    assert compatible_from("0007") == "0005"
    assert compatible_from("0004") == "0004"  # it drops a CHECK: not declared expand-only
    for revision in code_revisions():
        oldest = compatible_from(revision)
        assert code_revisions().index(oldest) <= code_revisions().index(revision)


def test_refusals_are_one_line_and_say_what_to_do() -> None:
    older = judge(DatabaseSchema(("0004",))).refusal()
    assert "run `job-service migrate` first" in older and "0004" in older
    newer = judge(DatabaseSchema((FUTURE,), FUTURE, FUTURE)).refusal()
    assert "newer job-service" in newer and FUTURE in newer and HEAD in newer
    assert "\n" not in older + newer


# -- the runner -------------------------------------------------------------------------


async def test_each_revision_records_which_code_may_run_on_it(empty_url: str) -> None:
    await migrate(empty_url, "0004")
    assert await read_database_schema(empty_url) == DatabaseSchema(("0004",), "0004", "0004")
    await migrate(empty_url, "0007")
    assert await read_database_schema(empty_url) == DatabaseSchema(("0007",), "0007", "0005")
    await migrate(empty_url)
    assert await read_database_schema(empty_url) == DatabaseSchema(
        (HEAD,), HEAD, compatible_from(HEAD)
    )


async def test_a_database_migrated_before_the_record_gets_it(empty_url: str) -> None:
    await migrate(empty_url)
    await execute(empty_url, "DROP TABLE schema_compatibility")
    await migrate(empty_url)  # nothing to apply; the record is written all the same
    assert await read_database_schema(empty_url) == DatabaseSchema(
        (HEAD,), HEAD, compatible_from(HEAD)
    )


async def test_migrate_refuses_a_schema_newer_than_the_code(empty_url: str) -> None:
    await migrate(empty_url)
    await pretend_a_newer_version_migrated(empty_url, HEAD)
    with pytest.raises(SchemaTooNew, match=f"revision {FUTURE}, newer than this job-service"):
        await migrate(empty_url)
    assert (await read_database_schema(empty_url)).revisions == (FUTURE,)


@pytest.mark.postgres
async def test_each_revision_commits_alone_and_a_lock_timeout_keeps_the_ones_before(
    empty_pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another session holds a lock on async_jobs: the revisions that only add tables
    (0006, 0007) commit, the first that alters async_jobs (0008) gives up after
    lock_timeout (tried LOCK_ATTEMPTS times) with a message saying to run migrate
    again, and leaves nothing of itself; run again without the lock, it completes."""
    monkeypatch.setattr(runner, "LOCK_ATTEMPTS", 2)
    await migrate(empty_pg_url, "0005")
    engine = create_engine(empty_pg_url)
    try:
        async with engine.connect() as holder:
            await holder.execute(text("LOCK TABLE async_jobs IN ACCESS SHARE MODE"))
            with pytest.raises(MigrationLockTimeout) as refused:
                await migrate(empty_pg_url, lock_timeout=0.1)
            await holder.rollback()
    finally:
        await engine.dispose()
    message = str(refused.value)
    assert "after revision 0007" in message
    assert "run `job-service migrate` again" in message and "\n" not in message
    schema = await read_database_schema(empty_pg_url)
    assert schema == DatabaseSchema(("0007",), "0007", "0005")
    await migrate(empty_pg_url)
    assert (await read_database_schema(empty_pg_url)).revisions == (HEAD,)


@pytest.mark.postgres
async def test_concurrent_migrations_take_turns(empty_pg_url: str) -> None:
    """Without the session advisory lock the second run would try to create the tables
    the first is creating, between its per-revision commits."""
    await asyncio.gather(*(migrate(empty_pg_url) for _ in range(3)))
    assert (await read_database_schema(empty_pg_url)).revisions == (HEAD,)


@pytest.mark.postgres
async def test_0005_validates_its_check_in_a_transaction_of_its_own(empty_pg_url: str) -> None:
    """The ADD ... NOT VALID commits (its ACCESS EXCLUSIVE lock ends) before the
    VALIDATE scans the table; the CHECK ends validated, as before the split."""
    await migrate(empty_pg_url, "0004")
    engine = create_engine(empty_pg_url)
    events: list[str] = []

    def on_statement(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        for step in ("ADD", "VALIDATE"):
            if f"{step} CONSTRAINT ck_async_jobs_due_at" in statement:
                events.append(step)

    event.listen(engine.sync_engine, "before_cursor_execute", on_statement)
    event.listen(engine.sync_engine, "commit", lambda _conn: events.append("COMMIT"))
    try:
        async with engine.connect() as conn:
            await conn.run_sync(runner._upgrade, "0005", 5.0)
            validated = await conn.scalar(
                text(
                    "SELECT convalidated FROM pg_constraint WHERE conname = 'ck_async_jobs_due_at'"
                )
            )
    finally:
        await engine.dispose()
    assert validated is True
    assert "COMMIT" in events[events.index("ADD") : events.index("VALIDATE")]


@pytest.mark.postgres
async def test_0005_runs_again_after_stopping_between_its_transactions(
    empty_pg_url: str,
) -> None:
    # Stopped after the ADD's commit (VALIDATE hit lock_timeout): the CHECK is there,
    # NOT VALID, and alembic still says 0004.
    await migrate(empty_pg_url, "0004")
    await execute(
        empty_pg_url,
        "ALTER TABLE async_jobs ADD CONSTRAINT ck_async_jobs_due_at CHECK (true) NOT VALID",
    )
    await migrate(empty_pg_url)
    assert (await read_database_schema(empty_pg_url)).revisions == (HEAD,)


@pytest.mark.postgres
async def test_0009_runs_again_after_stopping_before_its_indexes(empty_pg_url: str) -> None:
    # Stopped after the counts' transaction committed (tables, triggers, backfill) and
    # before the CONCURRENTLY builds finished: alembic still says 0008.
    await migrate(empty_pg_url, "0009")
    await execute(
        empty_pg_url,
        "DROP INDEX ix_async_jobs_failed_type_at",
        "DROP INDEX ix_async_jobs_pending_type_due",
        "UPDATE alembic_version SET version_num = '0008'",
    )
    await migrate(empty_pg_url)
    assert (await read_database_schema(empty_pg_url)).revisions == (HEAD,)
    engine = create_engine(empty_pg_url)
    try:
        async with engine.connect() as conn:
            names = set(
                (
                    await conn.execute(
                        text("SELECT indexname FROM pg_indexes WHERE tablename = 'async_jobs'")
                    )
                ).scalars()
            )
            triggers = (
                await conn.execute(
                    text(
                        "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'async_jobs'::regclass"
                        " AND tgname LIKE 'tr_async_jobs_count_%'"
                    )
                )
            ).scalar_one()
    finally:
        await engine.dispose()
    assert {"ix_async_jobs_failed_type_at", "ix_async_jobs_pending_type_due"} <= names
    assert triggers == 4  # not doubled: each row would be counted twice


# -- a start ----------------------------------------------------------------------------


async def test_a_start_migrates_an_empty_database_unless_told_not_to(empty_url: str) -> None:
    with pytest.raises(SchemaMismatch, match="no schema yet: run `job-service migrate` first"):
        await prepare_schema(empty_url, migrate_on_start=False)
    assert (await prepare_schema(empty_url, migrate_on_start=True)).verdict is Verdict.CURRENT
    assert (await prepare_schema(empty_url, migrate_on_start=False)).verdict is Verdict.CURRENT


async def test_a_start_migrates_only_what_instances_of_the_older_schema_can_run_beside(
    empty_url: str,
) -> None:
    # 0004 -> head includes 0005's CHECK, which 0004's code may break: not at a start.
    await migrate(empty_url, "0004")
    with pytest.raises(SchemaMismatch, match="instances of 0004 cannot run on") as refused:
        await prepare_schema(empty_url, migrate_on_start=True)
    assert "\n" not in str(refused.value)
    assert (await read_database_schema(empty_url)).revisions == ("0004",)
    # 0007 -> head: every revision after 0005 is expand-only, 0007's instances keep working.
    await migrate(empty_url, "0007")
    with pytest.raises(SchemaMismatch, match=r"older than this job-service's.*run `job-service"):
        await prepare_schema(empty_url, migrate_on_start=False)
    assert (await read_database_schema(empty_url)).revisions == ("0007",)
    assert (await prepare_schema(empty_url, migrate_on_start=True)).verdict is Verdict.CURRENT


async def test_a_start_on_a_newer_schema_runs_only_if_the_schema_allows_it(
    empty_url: str,
) -> None:
    await migrate(empty_url)
    await pretend_a_newer_version_migrated(empty_url, compatible_from=HEAD)
    for migrate_on_start in (True, False):
        verdict = await prepare_schema(empty_url, migrate_on_start=migrate_on_start)
        assert verdict.verdict is Verdict.NEWER_COMPATIBLE
    await pretend_a_newer_version_migrated(empty_url, compatible_from=FUTURE)
    with pytest.raises(SchemaMismatch, match=f"needs code of revision {FUTURE} or newer"):
        await prepare_schema(empty_url, migrate_on_start=True)
    await pretend_a_newer_version_migrated(empty_url, compatible_from=None)
    with pytest.raises(SchemaMismatch, match="does not record which versions can run"):
        await prepare_schema(empty_url, migrate_on_start=True)
    assert (await read_database_schema(empty_url)).revisions == (FUTURE,)


def test_the_schema_module_knows_every_revision_file() -> None:
    versions = Path(schema_version.__file__).with_name("migrations") / "versions"
    files = sorted(p.name.split("_")[0] for p in versions.glob("0*.py"))
    assert list(code_revisions()) == files


def test_the_schema_module_says_what_each_migration_script_declares() -> None:
    """schema_version.REVISIONS (read at every start instead of the scripts) is the
    scripts' chain, oldest first, with each script's `expand_only`."""
    scripts = ScriptDirectory.from_config(runner.alembic_config())
    chain = list(reversed(list(scripts.walk_revisions())))
    assert [(s.revision, s.down_revision) for s in chain] == [
        (revision, code_revisions()[index - 1] if index else None)
        for index, revision in enumerate(code_revisions())
    ]
    declared = [(s.revision, getattr(s.module, "expand_only", False) is True) for s in chain]
    assert declared == list(schema_version.REVISIONS)


def test_a_start_on_a_schema_at_head_does_not_import_alembic(tmp_path: Path) -> None:
    """A fresh interpreter checks a migrated database as a start does: alembic, its
    templates (mako) and the migration scripts stay unloaded (a fifth of a second of
    every start on a migrated database)."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'jobs.db'}"
    asyncio.run(migrate(url))
    probe = (
        "import asyncio, sys\n"
        "from san_jobs.job_service.server import prepare_database\n"
        "from san_jobs.job_service.settings import JobServiceSettings\n"
        f"asyncio.run(prepare_database(JobServiceSettings(database_url={url!r})))\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'alembic', 'mako'}))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
