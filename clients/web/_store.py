"""san-web's own table of scraps (not JobService's database: the soft reference between
them is the scrap id, used as the job's target_id)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from san_shared.sqlite_files import prepare_sqlite_url

metadata = sa.MetaData()

scraps = sa.Table(
    "scraps",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("url", sa.Text, nullable=False, default=""),
    sa.Column("title", sa.Text, nullable=False, default=""),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("job_id", sa.String(36), nullable=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)


@dataclass(frozen=True, slots=True)
class Scrap:
    id: str
    url: str
    title: str
    text: str
    job_id: str | None
    created_at: datetime


class ScrapStore:
    """Every read and write of the scraps table."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    @classmethod
    async def open(cls, database_url: str) -> ScrapStore:
        # The scraps hold what users saved: a private file (0600) in a private folder
        # (0700 when made here), as job-service's database.
        prepare_sqlite_url(database_url)
        engine = create_async_engine(database_url)
        async with engine.begin() as connection:
            await connection.run_sync(metadata.create_all)
        return cls(engine)

    async def close(self) -> None:
        await self._engine.dispose()

    async def add(self, *, url: str, title: str, text: str) -> Scrap:
        scrap = Scrap(str(uuid.uuid4()), url, title, text, None, datetime.now(UTC))
        async with self._engine.begin() as connection:
            await connection.execute(
                scraps.insert().values(
                    id=scrap.id, url=url, title=title, text=text, created_at=scrap.created_at
                )
            )
        return scrap

    async def set_job(self, scrap_id: str, job_id: str) -> None:
        async with self._engine.begin() as connection:
            await connection.execute(
                scraps.update().where(scraps.c.id == scrap_id).values(job_id=job_id)
            )

    async def get(self, scrap_id: str) -> Scrap | None:
        async with self._engine.connect() as connection:
            row = (
                await connection.execute(sa.select(scraps).where(scraps.c.id == scrap_id))
            ).first()
        if row is None:
            return None
        return Scrap(row.id, row.url, row.title, row.text, row.job_id, row.created_at)

    async def delete(self, scrap_id: str) -> bool:
        async with self._engine.begin() as connection:
            result = await connection.execute(scraps.delete().where(scraps.c.id == scrap_id))
        return bool(result.rowcount)
