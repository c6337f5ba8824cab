"""JobService figures on SQLite and PostgreSQL, with real processes on loopback.

Prints, per database:
- enqueue throughput over gRPC with 64 concurrent callers, beside the rate of a
  no-op grpc.aio unary call (a health Check on a server that does nothing else)
  measured in the same run with the same client;
- end-to-end throughput (enqueue -> COMPLETED) through a real ai-gateway that
  answers at once (`--backend instant`);
- pickup latency (commit -> PROCESSING) p50/p99 at light load;
- memory per open StreamJobUpdates stream: the job-service's RSS before and after
  1,000 streams (each watching one PENDING job) are open, divided by 1,000.

Beside each throughput, the CPU time the job-service process spent per job (and the
whole machine's busy share), to show where the limit is on a small machine.

Usage: python bench/bench_jobs.py [--jobs N] [--databases sqlite,postgres]
                                  [--profile DIR]   (py-spy flame graphs per phase)
Bounded: every phase has a job count and a time limit; it stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from san.jobs.v1 import job_service_pb2 as pb
from san.jobs.v1 import job_service_pb2_grpc as pb_grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # bench scripts run from a checkout: reuse the test helpers

from tests.support.databases import (  # noqa: E402
    create_temp_postgres_database,
    drop_database,
    require_postgres,
)
from tests.support.processes import RunningService, start_gateway, start_job_service, start_service  # noqa: E402

CALLERS = 64
STREAMS = 1_000
PROFILE_DIR: Path | None = None  # --profile
TEXT = "Durable queues keep work safe. Workers claim jobs with leases. Failures are written down."


def card(i: int, prefix: str) -> pb.EnqueueRequest:
    return pb.EnqueueRequest(
        job_type=pb.JOB_TYPE_CARD_ANALYSIS,
        target_id=f"{prefix}-{i}",
        card_analysis_input=pb.CardAnalysisInput(text=TEXT),
    )


async def rate(
    call: Callable[[int], Awaitable[object]], count: int, callers: int = CALLERS
) -> float:
    """Calls per second of `call(i)` for i < count, `callers` at a time."""
    next_index = 0

    async def caller() -> None:
        nonlocal next_index
        while next_index < count:
            i = next_index
            next_index += 1
            await call(i)

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    return count / (time.perf_counter() - started)


async def noop_rate(address: str, count: int) -> float:
    async with grpc.aio.insecure_channel(address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service="")
        await health.Check(request)
        return await rate(lambda _i: health.Check(request), count)


async def enqueue_rate(address: str, count: int) -> float:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.JobServiceStub(channel)
        await stub.Enqueue(card(0, "warm"))
        return await rate(lambda i: stub.Enqueue(card(i, "enq")), count)


async def end_to_end(address: str, count: int, limit: float) -> float:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.JobServiceStub(channel)
        done = 0
        finished = asyncio.Event()

        async def count_completions() -> None:
            nonlocal done
            feed = stub.StreamJobUpdates(
                pb.StreamJobUpdatesRequest(statuses=[pb.JOB_STATUS_COMPLETED])
            )
            async for update in feed:
                if update.job.target_id.startswith("e2e-"):
                    done += 1
                    if done >= count:
                        finished.set()
                        feed.cancel()
                        return

        watcher = asyncio.create_task(count_completions())
        await asyncio.sleep(0.3)
        started = time.perf_counter()
        await rate(lambda i: stub.Enqueue(card(i, "e2e")), count)
        try:
            await asyncio.wait_for(finished.wait(), limit)
        except TimeoutError:
            print(f"    end to end: only {done}/{count} COMPLETED within {limit:.0f}s")
        elapsed = time.perf_counter() - started
        watcher.cancel()
        return done / elapsed


async def pickup_latency(address: str, count: int) -> tuple[float, float]:
    """Light load: one job at a time, every 20 ms. start_time - create_time per job."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.JobServiceStub(channel)
        ids = []
        for i in range(count):
            ids.append((await stub.Enqueue(card(i, "pickup"))).job.id)
            await asyncio.sleep(0.02)
        await asyncio.sleep(1.0)
        latencies = []
        for job_id in ids:
            job = (await stub.GetJob(pb.GetJobRequest(job_id=job_id))).job
            delta = job.attempts[0].start_time.ToDatetime() - job.create_time.ToDatetime()
            latencies.append(delta.total_seconds() * 1000)
        latencies.sort()
        return statistics.median(latencies), latencies[int(len(latencies) * 0.99) - 1]


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot."""
    with open("/proc/stat") as stat:
        ticks = [int(v) for v in stat.readline().split()[1:]]
    total = sum(ticks) / os.sysconf("SC_CLK_TCK")
    return total - (ticks[3] + ticks[4]) / os.sysconf("SC_CLK_TCK"), total


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


@contextlib.contextmanager
def measured(service: RunningService, phase: str, db: str) -> Iterator[dict[str, float]]:
    """CPU the job-service used during the block (and the machine's busy share); with
    --profile, a py-spy flame graph of the job-service for the block."""
    spy: subprocess.Popen[bytes] | None = None
    if PROFILE_DIR is not None:
        py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        out = PROFILE_DIR / f"{db}-{phase}.svg"
        spy = subprocess.Popen(
            [
                py_spy,
                "record",
                "--gil",
                "-r",
                "200",
                "-o",
                str(out),
                "--pid",
                str(service.proc.pid),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(0.5)
    figures: dict[str, float] = {}
    cpu, (busy, total) = _cpu_seconds(service.proc.pid), _machine_busy()
    try:
        yield figures
    finally:
        figures["service_cpu"] = _cpu_seconds(service.proc.pid) - cpu
        busy_after, total_after = _machine_busy()
        figures["machine_busy"] = (busy_after - busy) / max(total_after - total, 1e-9)
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)


def cpu_note(figures: dict[str, float], jobs: int) -> str:
    per_job = 1000 * figures["service_cpu"] / jobs
    return (
        f"[job-service CPU {per_job:.2f} ms/job, machine {100 * figures['machine_busy']:.0f}% busy]"
    )


async def stream_memory(service: RunningService, count: int) -> float:
    """Bytes of job-service RSS per open StreamJobUpdates stream: `count` streams, each
    watching one PENDING job, all open (each has sent its snapshot) at the same time."""
    async with grpc.aio.insecure_channel(service.address) as channel:
        stub = pb_grpc.JobServiceStub(channel)
        ids = []
        for start in range(0, count, CALLERS):
            replies = await asyncio.gather(
                *(
                    stub.Enqueue(card(i, "stream"))
                    for i in range(start, min(start + CALLERS, count))
                )
            )
            ids.extend(r.job.id for r in replies)
        await asyncio.sleep(1.0)
        before = _rss_bytes(service.proc.pid)
        calls = [stub.StreamJobUpdates(pb.StreamJobUpdatesRequest(job_ids=[i])) for i in ids]
        try:
            firsts = await asyncio.wait_for(asyncio.gather(*(c.read() for c in calls)), 60)
            if any(f is grpc.aio.EOF or f.job.status != pb.JOB_STATUS_PENDING for f in firsts):
                raise RuntimeError("a stream did not open on a PENDING job")
            await asyncio.sleep(1.0)
            after = _rss_bytes(service.proc.pid)
        finally:
            for call in calls:
                call.cancel()
        return (after - before) / count


def stop(*services: RunningService) -> None:
    for service in services:
        service.stop()


def bench_database(name: str, database_url: Callable[[], str], jobs: int, work: Path) -> None:
    print(f"\n== {name} ==")
    db = name.lower()
    # The no-op baseline: a grpc.aio server process answering health checks, nothing else.
    noop = start_service(
        "noop", ["ai-gateway", "--listen", "127.0.0.1:0", "--backend", "instant"], work
    )
    try:
        noop_per_s = asyncio.run(noop_rate(noop.address, jobs))
    finally:
        stop(noop)
    slow_gateway = start_gateway(work, "--backend", "instant", "--fault-latency", "30")
    url = database_url()
    # Enqueue alone: one worker, stuck on a slow gateway, so claims don't compete.
    service = start_job_service(
        work, "--workers", "1", gateway=slow_gateway.address, database_url=url
    )
    try:
        with measured(service, "enqueue", db) as enqueue_cpu:
            enqueue_per_s = asyncio.run(enqueue_rate(service.address, jobs))
        # Every job here stays PENDING (the one worker waits on the slow gateway).
        per_stream = asyncio.run(stream_memory(service, STREAMS))
    finally:
        service.kill()
        stop(slow_gateway)
    print(f"  no-op grpc.aio unary call : {noop_per_s:8.0f} calls/s ({CALLERS} callers)")
    share = 100 * enqueue_per_s / noop_per_s
    print(
        f"  Enqueue                   : {enqueue_per_s:8.0f} jobs/s  = {share:.0f}% of no-op  "
        + cpu_note(enqueue_cpu, jobs)
    )
    print(
        f"  memory per open stream    : {per_stream / 1024:8.1f} KB "
        f"(job-service RSS growth with {STREAMS} StreamJobUpdates streams open)"
    )

    gateway = start_gateway(work, "--backend", "instant")
    url = database_url()
    service = start_job_service(work, "--workers", "64", gateway=gateway.address, database_url=url)
    try:
        with measured(service, "end-to-end", db) as e2e_cpu:
            e2e = asyncio.run(end_to_end(service.address, jobs, limit=120))
        print(
            f"  end to end (enqueue->COMPLETED), instant gateway: {e2e:8.0f} jobs/s ({jobs} jobs)  "
            + cpu_note(e2e_cpu, jobs)
        )
    finally:
        stop(service)
    url = database_url()
    service = start_job_service(work, gateway=gateway.address, database_url=url)
    try:
        p50, p99 = asyncio.run(pickup_latency(service.address, 200))
        print(
            f"  pickup latency (commit->PROCESSING), light load: p50 {p50:.1f} ms, p99 {p99:.1f} ms"
        )
    finally:
        stop(service, gateway)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--databases", default="sqlite,postgres")
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="record py-spy flame graphs of the job-service per phase into DIR "
        "(needs py-spy: pip install py-spy)",
    )
    args = parser.parse_args()
    if args.profile is not None:
        global PROFILE_DIR
        PROFILE_DIR = args.profile
        PROFILE_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if "sqlite" in args.databases:
            counter = iter(range(100))
            bench_database(
                "SQLite",
                lambda: f"sqlite+aiosqlite:///{work / f'jobs-{next(counter)}.db'}",
                args.jobs,
                work,
            )
        if "postgres" in args.databases:
            reason = require_postgres()
            if reason:
                print(f"\n== PostgreSQL: skipped ({reason}) ==")
                return
            made: list[str] = []

            def fresh() -> str:
                made.append(create_temp_postgres_database())
                return made[-1]

            try:
                bench_database("PostgreSQL", fresh, args.jobs, work)
            finally:
                for url in made:
                    drop_database(url)


if __name__ == "__main__":
    main()
