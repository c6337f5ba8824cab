"""san-web's own analyses go at priority 1 (a person is waiting on the page): the
first analysis of a saved scrap, which the outbox delivers, and a re-analysis asked
for from the page. In process (httpx over ASGI), JobService faked in memory."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx

from san_jobs.client import CardAnalysisResult
from san_jobs.client.testing import FakeJobService
from san_jobs.web.app import OutboxSettings, create_app


async def test_a_saved_scrap_and_its_reanalysis_go_at_priority_1(tmp_path: Path) -> None:
    service = FakeJobService()
    app = create_app(
        job_service="in-memory",
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'web.db'}",
        client_factory=lambda _address: service.async_client(),
        outbox_settings=OutboxSettings(poll_interval=0.05, max_backoff=0.2),
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://web") as http:
            answer = await http.post("/api/scraps", json={"title": "Queues", "text": "Jobs."})
            assert answer.status_code == 202, answer.text
            scrap_id = answer.json()["scrapId"]
            deadline = time.monotonic() + 10
            while not (job_id := (await http.get(f"/api/scraps/{scrap_id}")).json()["jobId"]):
                assert time.monotonic() < deadline, "the outbox never delivered"
                await asyncio.sleep(0.02)
            assert service.job(job_id).priority == 1
            service.complete(
                job_id, CardAnalysisResult(summary="S.", tags=["t"], embedding=[1.0], model="m")
            )
            again = await http.post(f"/api/scraps/{scrap_id}/analyze")
            assert again.status_code == 202, again.text
            assert service.job(again.json()["jobId"]).priority == 1
