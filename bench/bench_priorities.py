"""Priorities under a backlog (issue 25 part 2), with real processes on loopback, on
SQLite and PostgreSQL.

A backlog of --backlog priority-5 jobs (100,000 by default, written straight into
the migrated database before job-service starts, so it is all due at once) drains
through a real ai-gateway that answers after --latency seconds (`--backend instant
--fault-latency`), job-service at its defaults (10 workers and 10 claimed ahead).
While it drains, phases of --phase seconds alternate:
- without: nothing else is enqueued; the backlog's drain rate is the priority-5 jobs
  COMPLETED in the phase (GetJobStats' counts) per second;
- with: --urgent priority-1 jobs are enqueued one by one, evenly spread over the
  phase; each one's latency is its attempt's start_time - create_time (both written
  by job-service: commit of the Enqueue to the claim that made it PROCESSING); the
  drain rate counts the priority-5 jobs only.
Prints, per database: p50/p99/max of the urgent jobs' latency (over every `with`
phase), and the drain rate with and without them (the median of each phase kind)
and the drop.

Usage: python bench/bench_priorities.py [--backlog N] [--urgent N] [--phase S]
           [--rounds R] [--latency S] [--databases sqlite,postgres]
Bounded: each phase lasts --phase seconds; the backlog need not drain (it is
--backlog jobs deep when the first phase starts, and the figures are taken while
most of it is still waiting).
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import grpc

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from bench_jobs import TEXT, each_database, stop  # noqa: E402

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb  # noqa: E402
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc  # noqa: E402
from tests.support.databases import asyncpg_dsn  # noqa: E402
from tests.support.processes import start_gateway, start_job_service  # noqa: E402

PG_LOAD = """
INSERT INTO async_jobs (id, job_type, status, target_id, request_params, requested_by,
    max_attempts, attempts, created_at, updated_at, due_at, priority, tenant)
SELECT md5('backlog-' || g)::uuid::text, 'CARD_ANALYSIS', 'PENDING', 'backlog-' || g,
    jsonb_build_object('text', $2::text), 'bench', 3, '[]', t.at, t.at, t.at, 5, ''
FROM generate_series(1, $1::int) AS g
CROSS JOIN LATERAL (SELECT now() - interval '1 hour' + interval '1 microsecond' * g AS at) AS t
"""
SQLITE_LOAD = """
INSERT INTO async_jobs (id, job_type, status, target_id, request_params, requested_by,
    max_attempts, attempts, created_at, updated_at, due_at, priority, tenant)
VALUES (?, 'CARD_ANALYSIS', 'PENDING', ?, ?, 'bench', 3, '[]', ?, ?, ?, 5, '')
"""


def migrated(url: str) -> str:
    job_service = Path(sys.executable).parent / "job-service"
    subprocess.run(
        [str(job_service), "migrate", "--database-url", url], check=True, capture_output=True
    )
    return url


def load_backlog(url: str, count: int) -> None:
    """`count` due priority-5 jobs, written as Enqueue would (the counts' triggers see
    them), oldest an hour ago."""
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.split("///", 1)[1])
        start = datetime.now(UTC) - timedelta(hours=1)
        params = '{"text": "%s"}' % TEXT  # noqa: UP031 (JSON text, no quotes in TEXT)

        def rows() -> Iterator[tuple[str, ...]]:
            for g in range(count):
                at = (start + timedelta(microseconds=g)).strftime("%Y-%m-%d %H:%M:%S.%f")
                yield (str(uuid.uuid4()), f"backlog-{g}", params, at, at, at)

        conn.executemany(SQLITE_LOAD, rows())
        conn.commit()
        conn.close()
        return

    async def load() -> None:
        conn = await asyncpg.connect(asyncpg_dsn(url))
        await conn.execute(PG_LOAD, count, TEXT)
        await conn.execute("VACUUM ANALYZE async_jobs")
        await conn.close()

    asyncio.run(load())


def urgent(prefix: str, i: int) -> pb.EnqueueRequest:
    return pb.EnqueueRequest(
        job_type=pb.JOB_TYPE_CARD_ANALYSIS,
        target_id=f"{prefix}-{i}",
        card_analysis_input=pb.CardAnalysisInput(text=TEXT),
        priority=1,
    )


async def completed(stub: pb_grpc.JobServiceStub) -> int:
    stats = await stub.GetJobStats(pb.GetJobStatsRequest())  # type: ignore[misc]  # aio stub
    return sum(c.count for c in stats.counts if c.status == pb.JOB_STATUS_COMPLETED)


async def phases(
    address: str, rounds: int, seconds: float, count: int
) -> tuple[list[float], list[float], list[float], int]:
    """Drain rates without and with urgent jobs (per phase), the urgent jobs' latencies
    in ms, and the backlog still PENDING at the end."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.JobServiceStub(channel)
        await asyncio.sleep(2.0)  # the pool full, the drain at its pace
        without: list[float] = []
        with_urgent: list[float] = []
        latencies: list[float] = []
        for index in range(rounds):
            before = await completed(stub)
            await asyncio.sleep(seconds)
            without.append((await completed(stub) - before) / seconds)

            before = await completed(stub)
            started = time.perf_counter()
            ids = []
            for i in range(count):
                ids.append((await stub.Enqueue(urgent(f"urgent-{index}", i))).job.id)
                pause = started + (i + 1) * seconds / count - time.perf_counter()
                await asyncio.sleep(max(pause, 0.0))
            after = await completed(stub)
            elapsed = time.perf_counter() - started
            finished = 0
            for job_id in ids:
                job = (await stub.GetJob(pb.GetJobRequest(job_id=job_id))).job
                deadline = time.monotonic() + 30
                while not job.attempts:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"urgent job {job_id} never started")
                    await asyncio.sleep(0.05)
                    job = (await stub.GetJob(pb.GetJobRequest(job_id=job_id))).job
                delta = job.attempts[0].start_time.ToDatetime() - job.create_time.ToDatetime()
                latencies.append(delta.total_seconds() * 1000)
                finished += job.status == pb.JOB_STATUS_COMPLETED
            # The urgent jobs COMPLETED by `after` are not the backlog's: at most these.
            with_urgent.append((after - before - finished) / elapsed)
        stats = await stub.GetJobStats(pb.GetJobStatsRequest())
        pending = sum(c.count for c in stats.counts if c.status == pb.JOB_STATUS_PENDING)
        return without, with_urgent, latencies, pending


def bench_database(
    name: str, fresh: Callable[[], str], args: argparse.Namespace, work: Path
) -> None:
    print(f"\n== {name} ==", flush=True)
    url = migrated(fresh())
    started = time.perf_counter()
    load_backlog(url, args.backlog)
    took = time.perf_counter() - started
    print(f"  backlog: {args.backlog} priority-5 jobs written in {took:.1f} s")
    gateway = start_gateway(work, "--backend", "instant", "--fault-latency", str(args.latency))
    service = start_job_service(work, gateway=gateway.address, database_url=url)
    try:
        without, with_urgent, latencies, pending = asyncio.run(
            phases(service.address, args.rounds, args.phase, args.urgent)
        )
    finally:
        stop(service, gateway)
    latencies.sort()
    p99 = latencies[int(0.99 * (len(latencies) - 1))]
    print(
        f"  urgent (priority 1) enqueue -> PROCESSING over {len(latencies)} jobs: "
        f"p50 {statistics.median(latencies):.0f} ms, p99 {p99:.0f} ms, max {latencies[-1]:.0f} ms"
    )
    rate_without, rate_with = statistics.median(without), statistics.median(with_urgent)
    print(
        f"  backlog drain: {rate_without:.0f} jobs/s without urgent jobs "
        f"(phases {', '.join(f'{r:.0f}' for r in without)}), {rate_with:.0f} jobs/s with "
        f"(phases {', '.join(f'{r:.0f}' for r in with_urgent)}): "
        f"{100 * (rate_with / rate_without - 1):+.1f} %"
    )
    print(f"  backlog still PENDING at the end: {pending}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--urgent", type=int, default=25, help="urgent jobs per phase")
    parser.add_argument("--phase", type=float, default=10.0, help="seconds per phase")
    parser.add_argument("--rounds", type=int, default=2, help="pairs of phases")
    parser.add_argument("--latency", type=float, default=0.02, help="gateway seconds per call")
    parser.add_argument("--databases", default="sqlite,postgres")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        each_database(
            args.databases, work, lambda name, fresh: bench_database(name, fresh, args, work)
        )


if __name__ == "__main__":
    main()
