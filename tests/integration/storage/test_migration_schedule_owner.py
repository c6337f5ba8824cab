"""Migration 0019 (issue 42, point 6): from 0018 with schedules, on SQLite and
PostgreSQL. Each schedule stored before it is given the token of its tenant's name
that was the newest when it was created (the token that created it), so a schedule
of a token since revoked is held at once, one created by the name's new token is
not, and a tenant no token ever had (a client certificate; "" under --auth off) has
none and fires as before."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text

from san_jobs.job_service.domain.ports import ListSchedulesParams
from san_jobs.job_service.storage.engine import create_engine
from san_jobs.job_service.storage.migrate import migrate
from san_jobs.job_service.storage.repository import SqlJobStore
from tests.support.databases import create_temp_postgres_database_async, drop_database_async
from tests.support.schema_states import execute

DEFINITION = (
    '{"template": {"job_type": "CARD_ANALYSIS", "target_id": "t", "request_params":'
    ' {"text": "x"}, "max_attempts": 3, "priority": 3, "on_duplicate": "REJECT"},'
    ' "cron": null, "time_zone": "", "interval_seconds": 60.0, "catchup_seconds": 0.0}'
)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def url_at_0018(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'jobs.db'}"
    else:
        request.getfixturevalue("postgres_server")
        url = await create_temp_postgres_database_async(migrated=False)
    await migrate(url, "0018")
    yield url
    if request.param == "postgres":
        await drop_database_async(url)


def _token(token_id: str, name: str, created: str, revoked: str | None = None) -> str:
    revoked_at = "NULL" if revoked is None else f"'{revoked}'"
    return (
        "INSERT INTO api_tokens (id, name, role, token_hash, created_at, revoked_at)"
        f" VALUES ('{token_id}', '{name}', 'submitter', '{token_id:a<64}', '{created}',"
        f" {revoked_at})"
    )


def _schedule(tenant: str, schedule_id: str, created: str) -> str:
    """A schedule row as code of 0018 writes it (no owner_token_id)."""
    return (
        "INSERT INTO job_schedules (tenant, schedule_id, requested_by, definition, paused,"
        " next_fire_at, skipped_count, created_at, updated_at)"
        f" VALUES ('{tenant}', '{schedule_id}', '{tenant or 'web'}', '{DEFINITION}', FALSE,"
        f" '2026-12-01 00:00:00', 0, '{created}', '{created}')"
    )


async def test_0019_gives_each_schedule_the_token_that_created_it(url_at_0018: str) -> None:
    url = url_at_0018
    await execute(
        url,
        _token("tok-old", "alice", "2026-11-01 00:00:00", revoked="2026-11-15 00:00:00"),
        _token("tok-new", "alice", "2026-11-20 00:00:00"),
        _schedule("alice", "by-old", "2026-11-10 00:00:00"),
        _schedule("alice", "by-new", "2026-11-25 00:00:00"),
        _schedule("cert-caller", "free", "2026-11-25 00:00:00"),
        _schedule("", "anonymous", "2026-11-25 00:00:00"),
    )
    await migrate(url)
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                text("SELECT schedule_id, owner_token_id FROM job_schedules ORDER BY schedule_id")
            )
            owners = {row[0]: row[1] for row in rows}
    finally:
        await engine.dispose()
    assert owners == {"anonymous": None, "by-new": "tok-new", "by-old": "tok-old", "free": None}
    store = SqlJobStore(url, instance_id="a")
    try:
        shown = {
            s.schedule_id: s
            for s in (await store.schedules.list_schedules(ListSchedulesParams(None, 10, None)))[0]
        }
    finally:
        await store.close()
    assert "'alice' was revoked at 2026-11-15T00:00:00Z" in shown["by-old"].owner_hold
    assert not any(shown[s].held for s in ("by-new", "free", "anonymous"))
    assert shown["by-old"].next_fire_at < datetime.now(UTC)
