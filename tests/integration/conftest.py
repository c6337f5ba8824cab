"""Fresh, migrated databases for integration tests, on SQLite and on PostgreSQL.

`database_url` and `store` are parametrized over both (ids `sqlite`, `postgres`).
SQLite: a migrated template file copied per test. PostgreSQL: one throwaway database
per session (SAN_TEST_POSTGRES_URL, default postgresql+asyncpg://postgres@127.0.0.1:5432/
test, is only used to reach the server), TRUNCATEd before each test. No PostgreSQL:
skipped locally, a failure under CI (tests.support.ci).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest

from san_jobs.job_service.storage.notify import asyncpg_dsn
from san_jobs.job_service.storage.repository import SqlJobStore
from tests.support.ci import skip_or_fail_in_ci
from tests.support.clock import FakeClock
from tests.support.databases import (
    create_temp_postgres_database,
    drop_database,
    postgres_unreachable_reason,
    put_migrated_sqlite_file,
    run_sync,
)

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2025, 3, 1, 9, 0, 0, tzinfo=UTC))


@pytest.fixture(scope="session")
def postgres_server() -> None:
    """Skip (locally) or fail (under CI) when PostgreSQL cannot be reached."""
    reason = run_sync(postgres_unreachable_reason)
    if reason is not None:
        skip_or_fail_in_ci(reason)


@pytest.fixture(scope="session")
def postgres_url(postgres_server: None) -> Iterator[str]:
    """A migrated throwaway database for the whole session."""
    url = create_temp_postgres_database()
    yield url
    drop_database(url)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    path = tmp_path / "jobs.db"
    put_migrated_sqlite_file(path)
    return f"sqlite+aiosqlite:///{path}"


async def _truncate(url: str) -> None:
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        await conn.execute(
            "TRUNCATE async_jobs, dispatch_limits, job_changes, job_schedules, job_dependencies"
        )
        await conn.execute("UPDATE job_change_feed SET last_pos = 0, pruned_through = 0")
    finally:
        await conn.close()


@pytest.fixture
async def clean_postgres_url(postgres_url: str) -> str:
    await _truncate(postgres_url)
    return postgres_url


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest) -> str:
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    return str(request.getfixturevalue("clean_postgres_url"))


@pytest.fixture
async def store(database_url: str, clock: FakeClock) -> AsyncIterator[SqlJobStore]:
    job_store = SqlJobStore(database_url, instance_id="test-a", clock=clock)
    yield job_store
    await job_store.close()
