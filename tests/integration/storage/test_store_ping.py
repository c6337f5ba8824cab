"""JobStore.ping (health checks, san_jobs.job_service.db_health): answers while the database
does; StorageUnavailableError, quickly, when it cannot be reached: a PostgreSQL
server that refuses or never answers, a SQLite file that is gone."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from sqlalchemy import make_url

from san_jobs.job_service.domain.errors import StorageUnavailableError
from san_jobs.job_service.domain.ports import JobStore
from san_jobs.job_service.storage.repository import SqlJobStore
from tests.support.jobs_api import free_port
from tests.support.tcp_proxy import TcpProxy


async def test_ping_answers_while_the_database_does(store: JobStore) -> None:
    for _ in range(3):  # the connection it keeps is reused
        await store.ping()


async def test_ping_fails_when_the_sqlite_file_is_gone(sqlite_url: str) -> None:
    store = SqlJobStore(sqlite_url)
    try:
        await store.ping()
        path = Path(make_url(sqlite_url).database or "")
        moved = path.with_suffix(".away")
        # Open connections keep using a deleted file: the path is what counts.
        os.rename(path, moved)
        with pytest.raises(StorageUnavailableError, match="SQLite file cannot be found"):
            await store.ping()
        os.rename(moved, path)
        await store.ping()
    finally:
        await store.close()


async def test_ping_fails_when_nothing_listens() -> None:
    store = SqlJobStore(f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/jobs")
    try:
        with pytest.raises(StorageUnavailableError):
            await store.ping()
    finally:
        await store.close()


@pytest.mark.postgres
async def test_ping_follows_a_cut_connection_and_its_return(clean_postgres_url: str) -> None:
    url = make_url(clean_postgres_url)
    with TcpProxy(url.host or "127.0.0.1", url.port or 5432) as proxy:
        store = SqlJobStore(url.set(port=proxy.port).render_as_string(False))
        try:
            await store.ping()
            proxy.cut()
            with pytest.raises(StorageUnavailableError):
                await store.ping()
            proxy.cut(hang=True)
            # A silent server never answers: the caller's timeout ends the ping, and
            # the connection it left is not reused.
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.2):
                    await store.ping()
            proxy.restore()
            await store.ping()
        finally:
            await store.close()
