"""san-web in process for integration tests: the ASGI app over httpx, JobService a
FakeJobService (san_jobs.client.testing), san-web's database a SQLite file."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import sqlalchemy as sa
from starlette.applications import Starlette

from san_jobs.client import CardAnalysisResult
from san_jobs.client.testing import FakeJobService
from san_jobs.web._auth import AuthSettings
from san_jobs.web._cards import apply_job_change
from san_jobs.web._days import DaySettings
from san_jobs.web._passwords import hash_password
from san_jobs.web._store import ScrapStore, scrap_jobs
from san_jobs.web.app import OutboxSettings, create_app

PASSWORD = "lemon tree at sunrise"


@dataclass
class Web:
    app: Starlette
    service: FakeJobService

    def store(self) -> ScrapStore:
        store: ScrapStore = self.app.state.store
        return store

    @asynccontextmanager
    async def login(self, name: str) -> AsyncIterator[httpx.AsyncClient]:
        """A client of the app, logged in as ``name`` when the app has logins."""
        transport = httpx.ASGITransport(app=self.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://web") as http:
            if self.app.state.auth.mode == "password":
                answer = await http.post(
                    "/api/session", json={"username": name, "password": PASSWORD}
                )
                assert answer.status_code == 200, answer.text
                http.headers["X-CSRF-Token"] = answer.json()["csrfToken"]
            yield http

    async def save(self, http: httpx.AsyncClient, title: str, text: str = "Some text.") -> str:
        """A scrap saved through the API, once the outbox delivered it and san-web
        recorded its job in scrap_jobs (record_delivery sets the scrap's jobId first,
        then records it: a change applied in between raced that insert)."""
        answer = await http.post("/api/scraps", json={"title": title, "text": text})
        assert answer.status_code == 202, answer.text
        scrap_id: str = answer.json()["scrapId"]
        deadline = time.monotonic() + 10
        while True:
            job_id = (await http.get(f"/api/scraps/{scrap_id}")).json()["jobId"]
            if job_id:
                async with self.store().engine.connect() as conn:
                    query = sa.select(scrap_jobs.c.job_id).where(scrap_jobs.c.job_id == job_id)
                    if (await conn.execute(query)).first() is not None:
                        return scrap_id
            assert time.monotonic() < deadline, "the outbox never delivered"
            await asyncio.sleep(0.02)

    async def complete(
        self, http: httpx.AsyncClient, scrap_id: str, embedding: list[float], summary: str = "S."
    ) -> str:
        """JobService completes the scrap's job; the change is applied as the inbox does."""
        job_id: str = (await http.get(f"/api/scraps/{scrap_id}")).json()["jobId"]
        self.service.complete(
            job_id,
            CardAnalysisResult(summary=summary, tags=["t"], embedding=embedding, model="m"),
        )
        job = self.service.job(job_id)
        job.ClearField("card_analysis_input")  # the feed carries no input
        async with self.store().engine.begin() as conn:
            await apply_job_change(conn, job)
        return job_id


async def web_app(
    tmp_path: Path, mode: str, *, day_settings: DaySettings | None = None
) -> AsyncIterator[Web]:
    """san-web in process on a SQLite file, its JobService a FakeJobService; ``mode``
    "password" (users ann and bob, password PASSWORD) or "off"."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'web.db'}"
    if mode == "password":
        store = await ScrapStore.open(url)
        for name in ("ann", "bob"):
            await store.add_user(name, hash_password(PASSWORD))
        await store.close()
    service = FakeJobService()
    app = create_app(
        job_service="in-memory",
        database_url=url,
        client_factory=lambda _address: service.async_client(),
        auth=AuthSettings(mode="password") if mode == "password" else None,
        outbox_settings=OutboxSettings(poll_interval=0.05, max_backoff=0.2),
        day_settings=day_settings,
    )
    async with app.router.lifespan_context(app):
        yield Web(app, service)
