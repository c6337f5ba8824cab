"""A metrics scrape costs the database at most one query, however many scrapes come
(issue 14, point 2): /metrics served over real HTTP from a real store on SQLite and
PostgreSQL, every statement the engine runs counted."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from san_jobs.job_service.domain.model import JobType, NewJob, OnDuplicate
from san_jobs.job_service.domain.ports import EnqueueParams
from san_jobs.job_service.metrics import JobServiceMetrics
from san_jobs.job_service.storage.engine import create_engine
from san_jobs.job_service.storage.repository import SqlJobStore
from san_jobs.shared.metrics_http import MetricsListenError, MetricsServer


class StatementCounter:
    """Counts the statements a store runs: the store is made on our engine, so its
    autocommit connections (options of that engine) are seen too."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.count = 0
        event.listen(engine.sync_engine, "before_cursor_execute", self._seen)

    def _seen(self, *_: Any) -> None:
        self.count += 1


@pytest.fixture
async def counted_store(database_url: str) -> AsyncIterator[tuple[SqlJobStore, StatementCounter]]:
    engine = create_engine(database_url)
    counter = StatementCounter(engine)
    store = SqlJobStore(engine, instance_id="metrics-test")
    yield store, counter
    await store.close()


@pytest.fixture
async def store(counted_store: tuple[SqlJobStore, StatementCounter]) -> SqlJobStore:
    return counted_store[0]


@pytest.fixture
async def served(store: SqlJobStore) -> AsyncIterator[tuple[JobServiceMetrics, MetricsServer]]:
    metrics = JobServiceMetrics()
    metrics.watch_stats(store.queries.stats, asyncio.get_running_loop())
    server = MetricsServer("127.0.0.1:0", metrics.registry)
    server.start()
    yield metrics, server
    await asyncio.to_thread(server.stop)


def job_counts(text: str) -> dict[tuple[str, str], float]:
    counts = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "san_jobs_jobs":
                counts[(sample.labels["job_type"], sample.labels["status"])] = sample.value
    return counts


async def test_scrapes_cost_one_stats_query(
    counted_store: tuple[SqlJobStore, StatementCounter],
    served: tuple[JobServiceMetrics, MetricsServer],
) -> None:
    store, counter = counted_store
    _, server = served
    for target in ("a", "b", "c"):
        new = NewJob(JobType.EMBEDDING, target, {"text": "x"}, "", None, 3)
        await store.commands.enqueue(EnqueueParams(job=new, on_duplicate=OnDuplicate.REJECT))
    counter.count = 0
    await store.queries.stats()
    assert counter.count == 1  # stats() is one statement (storage/counts.py)

    counter.count = 0
    async with httpx.AsyncClient(timeout=10) as client:
        # Three in a row, then three at once (two Prometheus servers and a curl).
        pages = [(await client.get(server.url)).text for _ in range(3)]
        answers = await asyncio.gather(*(client.get(server.url) for _ in range(3)))
    pages += [answer.text for answer in answers]
    assert all(answer.status_code == 200 for answer in answers)
    for page in pages:
        assert job_counts(page)[("EMBEDDING", "PENDING")] == 3
    assert counter.count == 1  # six scrapes, one query


async def test_a_port_in_use_is_one_line(served: tuple[JobServiceMetrics, MetricsServer]) -> None:
    metrics, server = served
    second = MetricsServer(f"127.0.0.1:{server.port}", metrics.registry)
    with pytest.raises(MetricsListenError) as raised:
        second.start()
    message = str(raised.value)
    assert message.startswith(f"cannot serve metrics on 127.0.0.1:{server.port}: ")
    assert "\n" not in message
