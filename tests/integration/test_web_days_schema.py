"""Issue 43: a san-web database made before the days (no ``daily_notes``, no
``recall_questions``, no ``users.time_zone`` or ``users.til_at``) gets them when
san-web starts on it, on SQLite and PostgreSQL, without losing a row: its users,
sessions, scraps, jobs and cards are still there and still work."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from san_jobs.web._cards import apply_job_change
from san_jobs.web._store import ScrapStore, daily_notes, knowledge_cards, recall_questions
from tests.integration.test_web_cards import card_job
from tests.support.ci import skip_or_fail_in_ci
from tests.support.databases import (
    create_temp_postgres_database_async,
    drop_database_async,
    postgres_unreachable_reason,
)


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    ]
)
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'web.db'}"
        return
    reason = await postgres_unreachable_reason()
    if reason is not None:
        skip_or_fail_in_ci(reason)
    url = await create_temp_postgres_database_async(migrated=False)
    try:
        yield url
    finally:
        await drop_database_async(url)


async def test_an_older_san_web_database_gets_the_days_without_losing_a_row(
    database_url: str,
) -> None:
    # The database as the san-web before the days left it: every table of today's
    # schema but the days', and a users table without time_zone; rows in each.
    store = await ScrapStore.open(database_url)
    try:
        await store.add_user("ann", "argon2-hash", role="operator")
        await store.add_session("a" * 64, "ann", "csrf", datetime.now(UTC) + timedelta(hours=1))
        scrap = await store.add(url="https://example.org", title="Queues", text="t", owner="ann")
        job_id = str(uuid.uuid4())
        await store.set_job(scrap.id, job_id, owner="ann")
        async with store.engine.begin() as conn:
            await apply_job_change(conn, card_job(scrap.id, job_id=job_id, summary="Queues."))
            await conn.execute(sa.text("DROP TABLE recall_questions"))
            await conn.execute(sa.text("DROP TABLE daily_notes"))
            await conn.execute(sa.text("ALTER TABLE users DROP COLUMN time_zone"))
            await conn.execute(sa.text("ALTER TABLE users DROP COLUMN til_at"))
    finally:
        await store.close()

    store = await ScrapStore.open(database_url)  # san-web of issue 43 starts on it
    try:
        async with store.engine.connect() as conn:
            columns = await conn.run_sync(
                lambda sync: {c["name"] for c in sa.inspect(sync).get_columns("users")}
            )
            assert {"time_zone", "til_at"} <= columns
            summaries = (await conn.execute(sa.select(knowledge_cards.c.summary))).scalars()
            assert list(summaries) == ["Queues."]
            for table in (daily_notes, recall_questions):
                count = sa.select(sa.func.count()).select_from(table)
                assert (await conn.execute(count)).scalar_one() == 0
        assert await store.role("ann") == "operator"
        assert await store.password_hash("ann") == "argon2-hash"
        assert (session := await store.get_session("a" * 64)) is not None
        assert session.username == "ann"
        kept = await store.get(scrap.id, owner="ann")
        assert kept is not None and kept.title == "Queues" and kept.job_id == job_id
        assert await store.owns_job(job_id, "ann")
        assert await store.time_zones() == {"ann": None}
        assert await store.set_time_zone("ann", "Europe/Paris")
        assert await store.time_zones() == {"ann": "Europe/Paris"}
        assert await store.set_til_at("ann", "07:30")
        assert await store.day_ends() == {"ann": ("Europe/Paris", "07:30")}
    finally:
        await store.close()

    again = await ScrapStore.open(database_url)  # a second start changes nothing
    try:
        assert await again.time_zones() == {"ann": "Europe/Paris"}
    finally:
        await again.close()
