"""due_at is held to the status by the database (CHECK ck_async_jobs_due_at), on
SQLite and PostgreSQL; migration 0005 repairs the rows that broke the rule before it
adds the CHECK."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from _storage_support import enqueue
from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from san_jobs.job_service.domain.ports import ClaimParams, CompleteParams
from san_jobs.job_service.storage.engine import create_engine
from san_jobs.job_service.storage.migrate import migrate
from san_jobs.job_service.storage.repository import SqlJobStore
from san_jobs.job_service.storage.tables import async_jobs
from tests.support.clock import FakeClock
from tests.support.databases import create_temp_postgres_database_async, drop_database_async

t = async_jobs


async def _refused(engine: AsyncEngine, job_id: str, **values: Any) -> bool:
    """True if the database refuses to set `values` on the job (an IntegrityError)."""
    try:
        async with engine.begin() as conn:
            await conn.execute(update(t).where(t.c.id == job_id).values(**values))
    except IntegrityError:
        return True
    return False


async def test_the_database_refuses_a_due_at_that_breaks_the_rule(
    sql_store: SqlJobStore, clock: FakeClock
) -> None:
    engine = sql_store.engine
    later = clock.now + timedelta(hours=1)
    pending = await enqueue(sql_store, "pending")
    assert await _refused(engine, pending.id, due_at=None)
    assert await _refused(engine, pending.id, due_at=later)
    assert await _refused(engine, pending.id, next_attempt_at=later)  # due_at left behind
    assert not await _refused(engine, pending.id, next_attempt_at=later, due_at=later)

    await enqueue(sql_store, "processing")
    (claim,) = await sql_store.worker.claim(ClaimParams(limit=1, lease_seconds=60))
    lease = claim.job.lease_expires_at
    assert lease is not None
    assert await _refused(engine, claim.job.id, due_at=lease + timedelta(seconds=1))
    assert await _refused(engine, claim.job.id, lease_expires_at=None)
    assert await _refused(engine, claim.job.id, due_at=None, lease_expires_at=None)

    done = await sql_store.worker.complete(
        CompleteParams(job_id=claim.job.id, token=claim.token, result={"summary": "ok"})
    )
    assert await _refused(engine, done.id, due_at=clock.now)
    assert not await _refused(engine, done.id, due_at=None)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def unmigrated_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A database with no schema yet."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'jobs.db'}"
        return
    request.getfixturevalue("postgres_server")  # skip (or fail under CI) without one
    url = await create_temp_postgres_database_async(migrated=False)
    yield url
    await drop_database_async(url)


async def test_migration_0005_repairs_due_at_then_holds_it(unmigrated_url: str) -> None:
    await migrate(unmigrated_url, "0004")
    at = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
    retry, lease = at + timedelta(minutes=5), at + timedelta(minutes=1)

    def row(job_id: str, status: str, due_at: datetime | None, **values: Any) -> dict[str, Any]:
        return {
            "id": job_id,
            "job_type": "CARD_ANALYSIS",
            "status": status,
            "target_id": job_id,
            "request_params": {},
            "requested_by": "tester",
            "max_attempts": 3,
            "attempts": [],
            "created_at": at,
            "updated_at": at,
            "next_attempt_at": None,
            "lease_expires_at": None,
            "claim_token": None,
            "due_at": due_at,
        } | values

    rows = [
        row("pending-no-due", "PENDING", None),
        row("retry-wrong-due", "PENDING", at, next_attempt_at=retry),
        row("claimed-no-due", "PROCESSING", None, lease_expires_at=lease, claim_token="tok"),
        row("done-with-due", "COMPLETED", at),
        row("already-right", "PENDING", at),
    ]
    expected = {
        "pending-no-due": at,
        "retry-wrong-due": retry,
        "claimed-no-due": lease,
        "done-with-due": None,
        "already-right": at,
    }
    engine = create_engine(unmigrated_url)
    try:
        async with engine.begin() as conn:
            await conn.execute(insert(t), rows)
        await migrate(unmigrated_url)
        async with engine.connect() as conn:
            found = {r.id: r.due_at for r in await conn.execute(select(t.c.id, t.c.due_at))}
        assert found == expected
        assert await _refused(engine, "already-right", due_at=None)
    finally:
        await engine.dispose()
