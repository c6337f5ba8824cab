"""san_jobs_queue_depth says what it counts (issue 42, point 13): every PENDING job,
delayed and waiting for dependencies too, not only the ready ones; docs/metrics.md
says the same. No database: a scrape of the collector over fixed stats."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prometheus_client import generate_latest

from tests.unit.job_service.test_job_metrics import watched

DOCS = Path(__file__).resolve().parents[3] / "docs" / "metrics.md"


def _help(page: str, name: str) -> str:
    prefix = f"# HELP {name} "
    (line,) = [line for line in page.splitlines() if line.startswith(prefix)]
    return line[len(prefix) :]


async def test_queue_depth_says_it_counts_delayed_and_waiting_jobs() -> None:
    metrics, _ = watched()
    # In a thread, as prometheus-client's server scrapes (the stats are read then).
    page = (await asyncio.to_thread(generate_latest, metrics.registry)).decode()
    text = _help(page, "san_jobs_queue_depth")
    for words in ("ready or not", "delayed", "schedule_time", "dependencies"):
        assert words in text, text
    (row,) = [r for r in DOCS.read_text().splitlines() if r.startswith("| `san_jobs_queue_depth`")]
    for words in ("ready or not", "delayed", "dependencies"):
        assert words in row, row
