"""What dependencies (EnqueueRequest.depends_on, issue 26) cost the jobs that have
none, and how soon a dependent starts, with real processes on loopback, on SQLite and
PostgreSQL.

Prints, per database:
- end-to-end throughput of plain jobs (enqueue -> COMPLETED, instant gateway, 64
  callers, 64 workers) on a database with migration 0017's triggers, and on one where
  they were dropped (the service as if dependencies did not exist), in alternating
  rounds: the median of each, and the job-service + PostgreSQL CPU per job;
- the dependent's start at light load: a card due 0.2 s ahead, an EMBEDDING job
  depending on it; from the card's complete_time (the worker's commit, which the
  trigger makes the dependent due in) to the dependent's first attempt's
  start_time, p50/p99 over the pairs.

Usage: python bench/bench_dependencies.py [--jobs N] [--rounds R] [--pairs P]
       [--databases sqlite,postgres]
Bounded: every phase has a job count and a time limit; it stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import grpc
from google.protobuf.timestamp_pb2 import Timestamp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from bench_change_feed import compare_variants, migrated  # noqa: E402
from bench_jobs import card, each_database, end_to_end, measured, stop  # noqa: E402

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb  # noqa: E402
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc  # noqa: E402
from tests.support.databases import asyncpg_dsn  # noqa: E402
from tests.support.processes import start_gateway, start_job_service  # noqa: E402

SQLITE_TRIGGERS = (
    "tr_async_jobs_dependents_completed",
    "tr_async_jobs_dependents_ended",
    "tr_async_jobs_forget_dependencies",
)
PG_TRIGGERS = ("tr_async_jobs_dependents", "tr_async_jobs_forget_dependencies")


def without_triggers(url: str) -> None:
    """The database as it would be without dependencies: 0017's triggers dropped."""
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.split("///", 1)[1])
        for name in SQLITE_TRIGGERS:
            conn.execute(f"DROP TRIGGER {name}")
        conn.commit()
        conn.close()
        return

    async def drop() -> None:
        conn = await asyncpg.connect(asyncpg_dsn(url))
        for name in PG_TRIGGERS:
            await conn.execute(f"DROP TRIGGER {name} ON async_jobs")
        await conn.close()

    asyncio.run(drop())


async def dependent_start(address: str, pairs: int) -> tuple[float, float]:
    """p50/p99 ms from a dependency's complete_time to its dependent's first start."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.JobServiceStub(channel)
        delays: list[float] = []
        for index in range(pairs):
            soon = Timestamp()
            soon.FromDatetime(datetime.now(UTC) + timedelta(seconds=0.2))
            first = card(index, f"dep-{time.time_ns()}")
            first.schedule_time.CopyFrom(soon)
            dependency = (await stub.Enqueue(first)).job
            dependent = (
                await stub.Enqueue(
                    pb.EnqueueRequest(
                        job_type=pb.JOB_TYPE_EMBEDDING,
                        target_id=f"after-{dependency.id}",
                        embedding_input=pb.EmbeddingInput(text="After it."),
                        depends_on=[dependency.id],
                    )
                )
            ).job
            if not dependent.HasField("waiting_for"):
                raise RuntimeError("the dependent did not wait: the dependency ran too soon")
            deadline = time.monotonic() + 10
            while True:
                job = (await stub.GetJob(pb.GetJobRequest(job_id=dependent.id))).job
                if job.attempts:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("a dependent did not start within 10 s")
                await asyncio.sleep(0.005)
            done = (await stub.GetJob(pb.GetJobRequest(job_id=dependency.id))).job
            started = job.attempts[0].start_time.ToNanoseconds()
            delays.append((started - done.complete_time.ToNanoseconds()) / 1e6)
        delays.sort()
        return statistics.median(delays), delays[int(0.99 * (len(delays) - 1))]


def bench_database(
    name: str, fresh: Callable[[], str], jobs: int, rounds: int, pairs: int, work: Path
) -> None:
    print(f"\n== {name} ==", flush=True)
    db = name.lower()
    gateway = start_gateway(work, "--backend", "instant")
    try:
        results: dict[str, list[tuple[float, dict[str, float]]]] = {"with": [], "without": []}
        others = {"gateway": gateway.proc.pid}
        for index in range(rounds):
            for variant in ("with", "without"):
                url = migrated(fresh())
                if variant == "without":
                    without_triggers(url)
                service = start_job_service(
                    work, "--workers", "64", gateway=gateway.address, database_url=url
                )
                try:
                    with measured(service, f"e2e-{variant}-{index}", db, others) as figures:
                        per_s = asyncio.run(end_to_end(service.address, jobs, 180))
                    results[variant].append((per_s, figures))
                finally:
                    stop(service)
        compare_variants(
            results,
            jobs,
            labels={"with": "with 0017's triggers    ", "without": "without (triggers dropped)"},
            what="  plain jobs end to end",
            cost_label="cost to jobs without dependencies",
        )
        url = migrated(fresh())
        service = start_job_service(work, gateway=gateway.address, database_url=url)
        try:
            p50, p99 = asyncio.run(dependent_start(service.address, pairs))
            print(
                f"  dependent started after its dependency's commit: p50 {p50:.1f} ms,"
                f" p99 {p99:.1f} ms ({pairs} pairs, light load)"
            )
        finally:
            stop(service)
    finally:
        stop(gateway)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=100)
    parser.add_argument("--databases", default="sqlite,postgres")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        each_database(
            args.databases,
            work,
            lambda name, fresh: bench_database(
                name, fresh, args.jobs, args.rounds, args.pairs, work
            ),
        )


if __name__ == "__main__":
    main()
