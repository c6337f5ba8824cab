"""The storage contract suite: one set of tests for every JobStore, as River runs one
driver suite for every driver.

- `store` (and `open_store`, for several instances on one database) is parametrized
  over the three stores: `sqlite`, `postgres` (SqlJobStore) and `memory`
  (MemoryJobStore). Tests of behaviour, anything a JobStore promises, take these.
- `sql_store` is a SqlJobStore on SQLite and PostgreSQL only: for tests of SQL
  internals (statements run, the engine, a CHECK the database enforces). Tests that
  need a URL (`database_url`, `clean_postgres_url`) are SQL-only too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from _storage_support import OpenStore

from san_jobs.job_service.domain.ports import JobStore
from san_jobs.job_service.storage.memory import MemoryJobStore, MemoryTable
from san_jobs.job_service.storage.repository import SqlJobStore
from tests.support.clock import FakeClock

STORES = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    pytest.param("memory", id="memory"),
]
# Fixtures that give each SQL store its fresh database (tests/integration/conftest.py).
_DATABASE_FIXTURE = {"sqlite": "sqlite_url", "postgres": "clean_postgres_url"}


@pytest.fixture(params=STORES)
def store_database(request: pytest.FixtureRequest) -> str | None:
    """The URL of a fresh database for the SQL stores; None for the memory store.
    (A plain fixture: an async one cannot ask for the async clean_postgres_url.)"""
    kind: str = request.param
    if kind == "memory":
        return None
    return str(request.getfixturevalue(_DATABASE_FIXTURE[kind]))


@pytest.fixture
async def open_store(store_database: str | None, clock: FakeClock) -> AsyncIterator[OpenStore]:
    """Stores that share one fresh database (for the memory store: one MemoryTable),
    each standing for a JobService instance; all on the test's clock. Closed after
    the test (closing twice is harmless)."""
    opened: list[JobStore] = []
    table = MemoryTable()
    url = store_database

    def open_one(instance_id: str) -> JobStore:
        store: JobStore
        if url is None:
            store = MemoryJobStore(clock=clock, table=table)
        else:
            store = SqlJobStore(url, instance_id=instance_id, clock=clock)
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        await store.close()


@pytest.fixture
def store(open_store: OpenStore) -> JobStore:
    return open_store("test-a")


@pytest.fixture
async def sql_store(database_url: str, clock: FakeClock) -> AsyncIterator[SqlJobStore]:
    job_store = SqlJobStore(database_url, instance_id="test-a", clock=clock)
    yield job_store
    await job_store.close()
