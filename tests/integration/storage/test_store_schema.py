"""Migrations build exactly the models' schema; driver errors become our own."""

from __future__ import annotations

import re

import pytest
from _storage_support import enqueue
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import CheckConstraint, inspect, text
from sqlalchemy.exc import IntegrityError

from san_jobs.job_service.domain.errors import StorageFailureError, StorageUnavailableError
from san_jobs.job_service.domain.model import JobFilter
from san_jobs.job_service.domain.ports import ClaimParams, ListJobsParams
from san_jobs.job_service.storage.engine import create_engine
from san_jobs.job_service.storage.migrate import alembic_config, migrate
from san_jobs.job_service.storage.repository import SqlJobStore
from san_jobs.job_service.storage.tables import metadata


async def test_migrated_schema_equals_the_models(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:

            def diff(sync_conn):  # type: ignore[no-untyped-def]
                context = MigrationContext.configure(sync_conn, opts={"compare_type": True})
                return compare_metadata(context, metadata)

            assert await conn.run_sync(diff) == []

            def index_names(sync_conn):  # type: ignore[no-untyped-def]
                return {ix["name"] for ix in inspect(sync_conn).get_indexes("async_jobs")}

            assert await conn.run_sync(index_names) >= {
                "uq_async_jobs_tenant_active_target",
                "uq_async_jobs_tenant_request_id",
                "ix_async_jobs_due",
                "ix_async_jobs_failed_at",
            }

            # compare_metadata does not look at partial indexes' WHERE: check it here.
            dialect = conn.dialect.name

            def predicates(sync_conn):  # type: ignore[no-untyped-def]
                return {
                    ix["name"]: _words(ix["dialect_options"].get(f"{dialect}_where"))
                    for ix in inspect(sync_conn).get_indexes("async_jobs")
                }

            expected = {
                ix.name: _words(ix.dialect_options[dialect]["where"])
                for ix in metadata.tables["async_jobs"].indexes
            }
            assert await conn.run_sync(predicates) == expected

            # Nor at CHECK constraints.
            def checks(sync_conn):  # type: ignore[no-untyped-def]
                return {ck["name"] for ck in inspect(sync_conn).get_check_constraints("async_jobs")}

            modelled = {
                ck.name
                for ck in metadata.tables["async_jobs"].constraints
                if isinstance(ck, CheckConstraint)
            }
            assert await conn.run_sync(checks) == modelled
            assert "ck_async_jobs_claimed" in modelled
            assert expected["uq_async_jobs_tenant_request_id"] == {
                "request_id",
                "is",
                "not",
                "null",
            }
    finally:
        await engine.dispose()


def _words(predicate: object) -> set[str]:
    """The words of an index predicate (column names, keywords, literals), without
    the casts and the `IN` -> `= ANY (ARRAY[...])` PostgreSQL writes when it gives
    the predicate back."""
    if predicate is None:
        return set()
    rewritten = {"text", "character", "varying", "array", "any", "in"}
    return set(re.findall(r"[a-z_]+", str(predicate).lower())) - rewritten


async def test_migrate_twice_is_a_no_op(sql_store: SqlJobStore, database_url: str) -> None:
    """Migrating a database that is already at head, twice, changes nothing: its rows
    stay, alembic records one version (head), and the schema still equals the models."""
    job = await enqueue(sql_store, "survives-migrate")
    await migrate(database_url)
    await migrate(database_url)
    assert await sql_store.queries.get(job.id) == job
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    async with sql_store.engine.connect() as conn:
        versions = (await conn.execute(text("SELECT version_num FROM alembic_version"))).all()

        def diff(sync_conn):  # type: ignore[no-untyped-def]
            context = MigrationContext.configure(sync_conn, opts={"compare_type": True})
            return compare_metadata(context, metadata)

        assert await conn.run_sync(diff) == []
    assert [v for (v,) in versions] == [head]


async def test_an_unreachable_database_raises_storage_unavailable(tmp_path) -> None:  # type: ignore[no-untyped-def]
    urls = [
        f"sqlite+aiosqlite:///{tmp_path}/missing-dir/jobs.db",
        "postgresql+asyncpg://postgres@127.0.0.1:1/nowhere",
    ]
    for url in urls:
        store = SqlJobStore(url)
        try:
            with pytest.raises(StorageUnavailableError):
                await store.queries.list_jobs(
                    ListJobsParams(job_filter=JobFilter(), page_size=10, page_token=None)
                )
        finally:
            await store.close()


async def test_an_unmigrated_database_raises_storage_failure(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # A missing table is a broken deployment (INTERNAL), not an outage to retry.
    store = SqlJobStore(f"sqlite+aiosqlite:///{tmp_path}/empty.db")
    try:
        with pytest.raises(StorageFailureError):
            await store.queries.get("x")
    finally:
        await store.close()


async def test_only_a_processing_job_can_hold_a_claim_token(sql_store: SqlJobStore) -> None:
    """Outcome writes find their job by (id, token) alone: the database keeps the
    token to PROCESSING jobs."""
    store = sql_store
    job = await enqueue(store, "token-rule")
    for sql in (
        "UPDATE async_jobs SET claim_token = 'stray' WHERE id = :id",
        "UPDATE async_jobs SET status = 'PROCESSING' WHERE id = :id",
    ):
        async with store.engine.connect() as conn:
            with pytest.raises(IntegrityError):
                await conn.execute(text(sql), {"id": job.id})
    (claim,) = await store.worker.claim(ClaimParams(limit=1, lease_seconds=60))
    assert claim.job.id == job.id and claim.token
