"""Driver errors are classified by what they mean (storage/errors.py), from errors
that real drivers raise against real databases: a value the database refuses is
StorageDataError (never "unavailable"), a database that is not there is
StorageUnavailableError, anything else StorageFailureError."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest
from sqlalchemy import text

from san_jobs.job_service.domain.errors import (
    StorageDataError,
    StorageError,
    StorageFailureError,
    StorageUnavailableError,
)
from san_jobs.job_service.storage.engine import create_engine
from san_jobs.job_service.storage.errors import storage_errors
from tests.support.jobs_api import free_port


async def _raised(url: str, sql: str, params: dict[str, object] | None = None) -> StorageError:
    engine = create_engine(url, pool_timeout=2)
    try:
        with pytest.raises(StorageError) as caught, storage_errors():
            async with engine.connect() as conn:
                await conn.execute(text(sql), params or {})
    finally:
        await engine.dispose()
    return caught.value


@pytest.mark.postgres
async def test_postgres_data_errors_are_the_callers(postgres_url: str) -> None:
    nul = await _raised(
        postgres_url, "SELECT count(*) FROM async_jobs WHERE target_id = :v", {"v": "a\x00b"}
    )
    assert type(nul) is StorageDataError  # 22021 (invalid byte sequence), was UNAVAILABLE
    too_big = await _raised(postgres_url, "SELECT CAST(:v AS smallint)", {"v": "99999"})
    assert type(too_big) is StorageDataError  # 22003 numeric value out of range


@pytest.mark.postgres
async def test_postgres_unexpected_errors_are_failures(postgres_url: str) -> None:
    missing = await _raised(postgres_url, "SELECT * FROM no_such_table")
    assert type(missing) is StorageFailureError  # 42P01
    duplicate = await _raised(
        postgres_url,
        "CREATE TEMP TABLE t (k int PRIMARY KEY); INSERT INTO t VALUES (1), (1)",
    )
    # asyncpg refuses two statements in one prepared query: a driver misuse, ours.
    assert type(duplicate) is StorageFailureError


async def test_postgres_that_is_not_there_is_unavailable() -> None:
    url = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/test"
    assert type(await _raised(url, "SELECT 1")) is StorageUnavailableError


async def test_sqlite_locked_is_unavailable_and_its_text_stays_in_the_log(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (k int)")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        engine = create_engine(f"sqlite+aiosqlite:///{path}")
        try:
            with pytest.raises(StorageError) as caught, storage_errors():
                async with engine.connect() as conn:
                    await conn.exec_driver_sql("PRAGMA busy_timeout=50")
                    await conn.exec_driver_sql("SELECT * FROM t")
        finally:
            await engine.dispose()
    finally:
        holder.close()
    assert type(caught.value) is StorageUnavailableError
    assert "database is locked" in str(caught.value)


async def test_sqlite_unexpected_errors_are_failures(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"
    assert type(await _raised(url, "SELECT * FROM no_such_table")) is StorageFailureError
    too_large = await _raised(url, "SELECT :v", {"v": 2**70})  # int64 overflow on bind
    assert type(too_large) is StorageDataError


@pytest.mark.postgres
async def test_a_connection_busy_or_in_a_broken_state_is_unavailable(postgres_url: str) -> None:
    """asyncpg refuses a statement before sending any of it when its connection is
    busy or left mid-operation (seen while PostgreSQL shuts down: "cannot switch to
    state 15; another operation (2) is in progress", from a fresh pooled connection):
    nothing was stored, the database is not there for us: UNAVAILABLE, not INTERNAL."""
    conn = await asyncpg.connect(postgres_url.replace("postgresql+asyncpg", "postgresql"))
    try:
        sleeping = asyncio.ensure_future(conn.fetchval("SELECT pg_sleep(0.5)"))
        await asyncio.sleep(0.05)
        with pytest.raises(StorageError) as busy, storage_errors():
            await conn.fetchval("SELECT 1")
        await sleeping
    finally:
        await conn.close()
    assert type(busy.value) is StorageUnavailableError, busy.value
    with pytest.raises(StorageError) as broken, storage_errors():
        raise asyncpg.exceptions.InternalClientError(
            "cannot switch to state 15; another operation (2) is in progress"
        )
    assert type(broken.value) is StorageUnavailableError, broken.value
    # Any other client-side error stays ours.
    with pytest.raises(StorageError) as other, storage_errors():
        raise asyncpg.exceptions.InternalClientError("unexpected protocol state")
    assert type(other.value) is StorageFailureError
