"""Migration 0020 (issue 42, point 13): from 0019 with a feed that has positions, on
SQLite and PostgreSQL. The feed's row is given a key of its own (64 random bytes, a
different one per database), and nothing else of the feed moves: the feed id and
positions a reader's stored cursor names still resume."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text

from san_jobs.job_service.storage.engine import create_engine
from san_jobs.job_service.storage.migrate import migrate
from tests.support.databases import create_temp_postgres_database_async, drop_database_async


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def urls_at_0019(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[list[str]]:
    """Two databases at 0019."""
    if request.param == "sqlite":
        urls = [f"sqlite+aiosqlite:///{tmp_path / f'jobs{i}.db'}" for i in range(2)]
    else:
        request.getfixturevalue("postgres_server")
        urls = [await create_temp_postgres_database_async(migrated=False) for _ in range(2)]
    for url in urls:
        await migrate(url, "0019")
    yield urls
    if request.param == "postgres":
        for url in urls:
            await drop_database_async(url)


async def _feed(url: str) -> tuple[str, int, int, str | None]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            row = (
                await conn.execute(
                    text(
                        "SELECT feed_id, last_pos, pruned_through, cursor_key"
                        " FROM job_change_feed WHERE id = 1"
                    )
                )
            ).one()
    finally:
        await engine.dispose()
    return row.feed_id, int(row.last_pos), int(row.pruned_through), row.cursor_key


async def test_0020_gives_each_feed_a_key_of_its_own(urls_at_0019: list[str]) -> None:
    first = urls_at_0019[0]
    engine = create_engine(first)
    try:
        async with engine.begin() as conn:
            await conn.execute(
                text("UPDATE job_change_feed SET last_pos = 41, pruned_through = 7 WHERE id = 1")
            )
            before = (await conn.execute(text("SELECT feed_id FROM job_change_feed"))).scalar()
    finally:
        await engine.dispose()
    for url in urls_at_0019:
        await migrate(url)
    feed_id, last_pos, pruned_through, key = await _feed(first)
    assert (feed_id, last_pos, pruned_through) == (before, 41, 7)
    other_key = (await _feed(urls_at_0019[1]))[3]
    assert key is not None and other_key is not None
    assert len(bytes.fromhex(key)) == len(bytes.fromhex(other_key)) == 64
    assert key != other_key
