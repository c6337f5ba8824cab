"""procrastinate's batch defer, timed: the peer figure beside our BatchEnqueue.

Runs under an interpreter that has procrastinate installed (NOT a project
dependency: `python3 -m venv /tmp/procvenv && /tmp/procvenv/bin/pip install
procrastinate`); bench/bench_fanout.py starts it with --procrastinate-python and
reads the one JSON line it prints. It imports nothing from this repository.

Against an empty PostgreSQL database (--dsn, libpq form): applies procrastinate's
schema, warms the pool with one batch, then times `Task.batch_defer_async` of
--jobs jobs in batches of --batch, --callers batches in flight at once (the
bench's BatchEnqueue callers), and prints
{"jobs": N, "seconds": S, "jobs_per_s": R, "procrastinate": VERSION}.
Each job carries the same text as the bench's card-analysis jobs, so the rows
are of a like size.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import logging
import time
from typing import Any

import procrastinate  # type: ignore[import-not-found, unused-ignore]

TEXT = "Durable queues keep work safe. Workers claim jobs with leases. Failures are written down."


def batches(prefix: str, jobs: int, size: int) -> list[list[dict[str, Any]]]:
    """The jobs' keyword arguments, cut into batches of `size`, built before timing."""
    rows = [{"target_id": f"{prefix}-{i}", "text": TEXT} for i in range(jobs)]
    return [rows[start : start + size] for start in range(0, jobs, size)]


async def timed_defer(dsn: str, jobs: int, size: int, callers: int) -> dict[str, Any]:
    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=dsn, min_size=callers, max_size=callers)
    )

    @app.task(name="card_analysis", queue="cards")  # type: ignore[untyped-decorator, unused-ignore]
    async def card_analysis(target_id: str, text: str) -> None:  # never run here
        del target_id, text

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        warm = batches("warm", size, size)
        await asyncio.gather(*(card_analysis.batch_defer_async(*b) for b in warm * callers))
        pending = batches("bench", jobs, size)

        async def caller() -> None:
            while pending:
                await card_analysis.batch_defer_async(*pending.pop())

        started = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(callers)))
        seconds = time.perf_counter() - started
    return {
        "jobs": jobs,
        "seconds": seconds,
        "jobs_per_s": jobs / seconds,
        "procrastinate": importlib.metadata.version("procrastinate"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", required=True, help="postgresql://USER@HOST:PORT/DB (empty)")
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--callers", type=int, default=4)
    args = parser.parse_args()
    # It warns that the App is made in __main__ (fine for a script that defers only).
    logging.getLogger("procrastinate").setLevel(logging.ERROR)
    figures = asyncio.run(timed_defer(args.dsn, args.jobs, args.batch, args.callers))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
