"""Migration 0011 (issue 22, point 2): from 0010 with data, on SQLite and PostgreSQL.
The rows already there get their tenant (requested_by when it names a token, ""
otherwise), the old global unique indexes are gone and the per-tenant ones are there
(valid, on PostgreSQL), a key stored before the upgrade still means its job after it,
and an INSERT as code older than 0011 writes it (no tenant column) gets its tenant
from the trigger and is judged by the new indexes."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from _storage_support import new_job
from alembic import command
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError

from san_jobs.job_service.domain.model import OnDuplicate
from san_jobs.job_service.domain.ports import EnqueueParams
from san_jobs.job_service.storage.engine import create_engine
from san_jobs.job_service.storage.migrate import alembic_config, migrate
from san_jobs.job_service.storage.repository import SqlJobStore
from tests.support.databases import create_temp_postgres_database_async, drop_database_async
from tests.support.schema_states import execute

NEW_INDEXES = {"uq_async_jobs_tenant_active_target", "uq_async_jobs_tenant_request_id"}
OLD_INDEXES = {"uq_async_jobs_active_target", "uq_async_jobs_request_id"}
AT = "2026-12-01 00:00:00"
# Rows on PostgreSQL: more than one backfill batch (BACKFILL_BATCH is 5,000).
BULK_ROWS = 12_001


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def url_at_0010(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'jobs.db'}"
    else:
        request.getfixturevalue("postgres_server")
        url = await create_temp_postgres_database_async(migrated=False)
    await migrate(url, "0010")
    yield url
    if request.param == "postgres":
        await drop_database_async(url)


def _job_row(job_id: str, status: str, target: str, by: str, request_id: str | None) -> str:
    """An INSERT of a job row as code of 0010 writes it (no tenant column)."""
    due = f"'{AT}'" if status == "PENDING" else "NULL"
    rid = "NULL" if request_id is None else f"'{request_id}'"
    return (
        "INSERT INTO async_jobs (id, job_type, status, target_id, request_params, requested_by,"
        " request_id, attempt_count, max_attempts, attempts, created_at, updated_at, due_at)"
        f" VALUES ('{job_id}', 'CARD_ANALYSIS', '{status}', '{target}', '{{}}', '{by}', {rid},"
        f" 0, 3, '[]', '{AT}', '{AT}', {due})"
    )


async def _scalars(url: str, sql: str) -> list[object]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            return list((await conn.execute(text(sql))).scalars())
    finally:
        await engine.dispose()


async def test_0011_scopes_the_keys_of_the_rows_there_and_of_old_code(url_at_0010: str) -> None:
    url = url_at_0010
    postgres = url.startswith("postgresql")
    await execute(
        url,
        "INSERT INTO api_tokens (id, name, role, token_hash, created_at)"
        f" VALUES ('tok-1', 'alice-svc', 'submitter', '{'a' * 64}', '{AT}')",
        _job_row("job-alice-done", "COMPLETED", "t-done", "alice-svc", "rid-alice"),
        _job_row("job-alice-active", "PENDING", "t-1", "alice-svc", None),
        _job_row("job-anon-active", "PENDING", "t-2", "web-user-7", "rid-anon"),
    )
    if postgres:
        await execute(
            url,
            "INSERT INTO async_jobs (id, job_type, status, target_id, request_params,"
            " requested_by, attempt_count, max_attempts, attempts, created_at, updated_at)"
            " SELECT 'bulk-' || lpad(i::text, 8, '0'), 'CARD_ANALYSIS', 'CANCELLED',"
            " 'bulk-' || i, '{}', CASE WHEN i % 2 = 0 THEN 'alice-svc' ELSE 'x' END, 0, 3,"
            f" '[]', '{AT}', '{AT}' FROM generate_series(1, {BULK_ROWS}) AS i",
        )

    await migrate(url)

    tenants = await _scalars(
        url,
        "SELECT id || '=' || tenant FROM async_jobs WHERE id LIKE 'job-%' ORDER BY id",
    )
    assert tenants == ["job-alice-active=alice-svc", "job-alice-done=alice-svc", "job-anon-active="]
    assert await _scalars(url, "SELECT count(*) FROM async_jobs WHERE tenant IS NULL") == [0]
    if postgres:
        bulk = await _scalars(
            url,
            "SELECT count(*) FROM async_jobs WHERE id LIKE 'bulk-%' AND tenant = 'alice-svc'",
        )
        assert bulk == [BULK_ROWS // 2]
        valid = await _scalars(
            url,
            "SELECT c.relname || '=' || i.indisvalid FROM pg_index i"
            " JOIN pg_class c ON c.oid = i.indexrelid"
            " WHERE i.indrelid = 'async_jobs'::regclass AND c.relname LIKE 'uq_%' ORDER BY 1",
        )
        assert valid == [f"{name}=true" for name in sorted(NEW_INDEXES)]
        names = set(
            await _scalars(url, "SELECT indexname FROM pg_indexes WHERE tablename = 'async_jobs'")
        )
    else:
        names = set(
            await _scalars(
                url,
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'async_jobs'",
            )
        )
    assert names >= NEW_INDEXES and not OLD_INDEXES & names

    # A key stored before the upgrade still means its job, in its tenant.
    store = SqlJobStore(url, instance_id="new")
    try:
        alice = dataclasses.replace(
            new_job("t-elsewhere", request_id="rid-alice"), requested_by="alice-svc"
        )
        job, deduplicated = await store.commands.enqueue(
            EnqueueParams(
                job=dataclasses.replace(alice, tenant="alice-svc"), on_duplicate=OnDuplicate.REJECT
            )
        )
        assert deduplicated and job.id == "job-alice-done" and job.tenant == "alice-svc"
        bob = dataclasses.replace(alice, requested_by="bob", tenant="bob")
        job, deduplicated = await store.commands.enqueue(
            EnqueueParams(job=bob, on_duplicate=OnDuplicate.REJECT)
        )
        assert not deduplicated and job.tenant == "bob"
        # --auth off's tenant "" holds the row of a caller without a token.
        job, deduplicated = await store.commands.enqueue(
            EnqueueParams(job=new_job("t-2"), on_duplicate=OnDuplicate.RETURN_EXISTING)
        )
        assert deduplicated and job.id == "job-anon-active"
    finally:
        await store.close()

    # Code older than 0011 writes no tenant: the trigger gives the one new code would.
    old_insert = _job_row("job-old-bob", "PENDING", "t-1", "web-user-8", "rid-alice")
    await execute(url, old_insert + " ON CONFLICT DO NOTHING")
    assert await _scalars(url, "SELECT tenant FROM async_jobs WHERE id = 'job-old-bob'") == [""]
    # Its repeat of alice's active target within her tenant is refused: silently by
    # PostgreSQL (ON CONFLICT DO NOTHING, the trigger runs before the index check); by
    # an error on SQLite (its trigger runs after the insert), so still no duplicate.
    repeat = (
        _job_row("job-old-dup", "PENDING", "t-1", "alice-svc", None) + " ON CONFLICT DO NOTHING"
    )
    if postgres:
        await execute(url, repeat)
    else:
        with pytest.raises(IntegrityError):
            await execute(url, repeat)
    assert await _scalars(url, "SELECT count(*) FROM async_jobs WHERE id = 'job-old-dup'") == [0]


async def test_0011_downgrades_to_global_keys_and_upgrades_again(url_at_0010: str) -> None:
    url = url_at_0010
    await migrate(url)
    await execute(url, _job_row("job-1", "PENDING", "t-1", "x", "rid-1"))
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:

            def down(sync_conn):  # type: ignore[no-untyped-def]
                config = alembic_config()
                config.attributes["connection"] = sync_conn
                command.downgrade(config, "0010")
                sync_conn.commit()

            await conn.run_sync(down)
    finally:
        await engine.dispose()
    columns = await _columns(url)
    assert "tenant" not in columns and "request_id" in columns
    await migrate(url)
    assert await _scalars(url, "SELECT tenant FROM async_jobs") == [""]


async def _columns(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            return set(
                await conn.run_sync(
                    lambda c: {col["name"] for col in inspect(c).get_columns("async_jobs")}
                )
            )
    finally:
        await engine.dispose()
