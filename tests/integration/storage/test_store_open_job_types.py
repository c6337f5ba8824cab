"""A new job type needs no migration: since 0004 the database stores any type word
(the API accepts only registered ones, domain/job_types.py)."""

from __future__ import annotations

from _storage_support import enqueue
from sqlalchemy import text

from san_jobs.job_service.storage.repository import SqlJobStore


async def test_the_database_stores_a_type_it_was_never_told_of(sql_store: SqlJobStore) -> None:
    job = await enqueue(sql_store, "type-from-later")
    async with sql_store.engine.begin() as conn:
        # Under 0001's CHECK (three types by name) this was an IntegrityError.
        await conn.execute(
            text("UPDATE async_jobs SET job_type = 'A_TYPE_ADDED_LATER' WHERE id = :id"),
            {"id": job.id},
        )
        stored = await conn.execute(
            text("SELECT job_type FROM async_jobs WHERE id = :id"), {"id": job.id}
        )
        assert stored.scalar_one() == "A_TYPE_ADDED_LATER"
