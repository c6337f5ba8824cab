"""What the change feed (StreamJobChanges, issue 24) costs and how fast it answers,
with real processes on loopback, on SQLite and PostgreSQL.

Prints, per database:
- end-to-end throughput (enqueue -> COMPLETED, instant gateway, 64 callers, 64
  workers) on a fresh database with the change trigger, and on one where it was
  dropped (no change recorded: the service as it was before the feed), in
  alternating rounds; the median of each and its job-service and PostgreSQL CPU per
  job: the hot path's cost of recording every change;
- catch-up: a StreamJobChanges from the start reading every change of that run
  (changes per second);
- live latency at light load: a caught-up stream, one job at a time; from the job's
  complete_time (the worker's commit) to the change's arrival, p50/p99. On
  PostgreSQL also with the stream on a second instance (the change crosses
  NOTIFY and the other instance's sequencer).

Usage: python bench/bench_change_feed.py [--jobs N] [--rounds R] [--databases sqlite,postgres]
Bounded: every phase has a job count and a time limit; it stops by itself.
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
from collections.abc import Callable
from pathlib import Path

import asyncpg
import grpc

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from bench_jobs import card, cpu_note, each_database, end_to_end, measured, stop  # noqa: E402

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb  # noqa: E402
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc  # noqa: E402
from tests.support.databases import asyncpg_dsn  # noqa: E402
from tests.support.processes import start_gateway, start_job_service  # noqa: E402

DROP_TRIGGER = "DROP TRIGGER tr_async_jobs_change"


def without_trigger(url: str) -> None:
    """The database as it would be without the feed: its trigger dropped."""
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.split("///", 1)[1])
        conn.execute(DROP_TRIGGER)
        conn.commit()
        conn.close()
        return

    async def drop() -> None:
        conn = await asyncpg.connect(asyncpg_dsn(url))
        await conn.execute(f"{DROP_TRIGGER} ON async_jobs")
        await conn.close()

    asyncio.run(drop())


def migrated(url: str) -> str:
    job_service = Path(sys.executable).parent / "job-service"
    subprocess.run(
        [str(job_service), "migrate", "--database-url", url], check=True, capture_output=True
    )
    return url


Runs = dict[str, list[tuple[float, dict[str, float]]]]


def compare_variants(
    results: Runs, jobs: int, *, labels: dict[str, str], what: str, cost_label: str
) -> None:
    """Print each variant's median throughput (and its rounds, and the CPU note of the
    median round), the cost of "with" against "without" in throughput, and the CPU
    per job of each (job-service + PostgreSQL): the steadier figure, since throughput
    on a small shared machine moves +-20 % between rounds."""
    medians = {}
    for variant, runs in results.items():
        runs.sort(key=lambda r: r[0])
        per_s, figures = runs[len(runs) // 2]
        medians[variant] = per_s
        print(
            f"{what}, {labels[variant]}: {per_s:7.0f} jobs/s (rounds "
            f"{', '.join(f'{r:.0f}' for r, _ in runs)})\n      "
            + cpu_note(figures, jobs, others=True)
        )
    cost = 100 * (1 - medians["with"] / medians["without"])
    print(f"  {cost_label}: {cost:+.1f} % of throughput (medians)")
    cpu = {
        variant: statistics.median(
            1000 * (f["service_cpu"] + f.get("cpu:PostgreSQL", 0.0)) / jobs for _, f in runs
        )
        for variant, runs in results.items()
    }
    print(
        f"  CPU per job, job-service + database: {cpu['with']:.2f} ms with, "
        f"{cpu['without']:.2f} ms without ({100 * (cpu['with'] / cpu['without'] - 1):+.1f} %)"
    )


async def catch_up(address: str, count: int) -> float:
    """Changes per second of a stream from the start reading `count` changes."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.JobServiceStub(channel)
        started = time.perf_counter()
        seen = 0
        call = stub.StreamJobChanges(pb.StreamJobChangesRequest(), timeout=120)
        async for change in call:
            if change.HasField("job"):
                seen += 1
                if seen == count:
                    break
        call.cancel()
        return count / (time.perf_counter() - started)


async def live_latency(write: str, read: str, count: int) -> tuple[float, float]:
    """p50/p99 ms from each job's complete_time to its change's arrival on `read`."""
    async with grpc.aio.insecure_channel(write) as wchan, grpc.aio.insecure_channel(read) as rchan:
        writer, reader = pb_grpc.JobServiceStub(wchan), pb_grpc.JobServiceStub(rchan)
        call = reader.StreamJobChanges(pb.StreamJobChangesRequest(), timeout=300)
        arrived: dict[str, float] = {}
        latencies: list[float] = []

        async def read_all() -> None:
            async for change in call:
                if change.HasField("job"):
                    arrived[change.job.id] = time.time()

        reading = asyncio.ensure_future(read_all())
        for index in range(count):
            job = (await writer.Enqueue(card(index, f"live-{time.time_ns()}"))).job
            deadline = time.monotonic() + 10
            while job.id not in arrived:
                if time.monotonic() > deadline:
                    raise RuntimeError("live: a change did not arrive within 10 s")
                await asyncio.sleep(0.001)
            done = (await writer.GetJob(pb.GetJobRequest(job_id=job.id))).job
            latencies.append(1000 * (arrived[job.id] - done.complete_time.ToNanoseconds() / 1e9))
            await asyncio.sleep(0.02)
        call.cancel()
        reading.cancel()
        latencies.sort()
        return statistics.median(latencies), latencies[int(0.99 * (len(latencies) - 1))]


def bench_database(name: str, fresh: Callable[[], str], jobs: int, rounds: int, work: Path) -> None:
    print(f"\n== {name} ==", flush=True)
    db = name.lower()
    gateway = start_gateway(work, "--backend", "instant")
    try:
        results: dict[str, list[tuple[float, dict[str, float]]]] = {"with": [], "without": []}
        catch_up_rates: list[float] = []
        for index in range(rounds):
            for variant in ("with", "without"):
                url = migrated(fresh())
                if variant == "without":
                    without_trigger(url)
                service = start_job_service(
                    work, "--workers", "64", gateway=gateway.address, database_url=url
                )
                try:
                    others = {"gateway": gateway.proc.pid}
                    with measured(service, f"e2e-{variant}-{index}", db, others) as figures:
                        per_s = asyncio.run(end_to_end(service.address, jobs, 180))
                    results[variant].append((per_s, figures))
                    if variant == "with":
                        catch_up_rates.append(asyncio.run(catch_up(service.address, jobs)))
                finally:
                    stop(service)
        compare_variants(
            results,
            jobs,
            labels={"with": "with the change feed   ", "without": "without (trigger dropped)"},
            what="  end to end",
            cost_label="cost of recording changes",
        )
        print(
            f"  catch-up read from the start: {statistics.median(catch_up_rates):8.0f} changes/s "
            f"({jobs} changes; rounds {', '.join(f'{r:.0f}' for r in catch_up_rates)})"
        )
        url = migrated(fresh())
        first = start_job_service(work, gateway=gateway.address, database_url=url)
        try:
            p50, p99 = asyncio.run(live_latency(first.address, first.address, 200))
            print(f"  live, same instance (complete -> change): p50 {p50:.1f} ms, p99 {p99:.1f} ms")
            if db == "postgresql":
                second = start_job_service(
                    work, "--workers", "1", gateway=gateway.address, database_url=url
                )
                try:
                    p50, p99 = asyncio.run(live_latency(first.address, second.address, 200))
                    print(f"  live, stream on another instance: p50 {p50:.1f} ms, p99 {p99:.1f} ms")
                finally:
                    stop(second)
        finally:
            stop(first)
    finally:
        stop(gateway)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--databases", default="sqlite,postgres")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        each_database(
            args.databases,
            work,
            lambda name, fresh: bench_database(name, fresh, args.jobs, args.rounds, work),
        )


if __name__ == "__main__":
    main()
