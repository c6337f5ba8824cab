"""JobService figures on SQLite and PostgreSQL, with real processes on loopback.

Prints, per database:
- enqueue throughput over gRPC with 64 concurrent callers, beside the rate of a
  no-op grpc.aio unary call (a health Check on a server that does nothing else)
  measured in the same run with the same client, in alternating rounds (the
  median of the rounds is shown, with each round's share of the no-op rate);
- end-to-end throughput (enqueue -> COMPLETED) through a real ai-gateway that
  answers at once (`--backend instant`): N jobs enqueued by 64 callers, timed from
  the first Enqueue until no job is PENDING or PROCESSING any more (a ListJobs
  probe every 20 ms), then checked to be all COMPLETED; and the same with a live
  feed (StreamJobUpdates) watching every completion, which costs the service a
  stream message per job;
- pickup latency (commit -> PROCESSING) p50/p99 at light load;
- memory per open StreamJobUpdates stream: the job-service's RSS before and after
  1,000 streams (each watching one PENDING job) are open, divided by 1,000.

Beside each throughput, the CPU time per job of the job-service process (and of the
other processes: PostgreSQL, the gateway, the bench client) and the whole machine's
busy share, to show where the limit is on a small machine.

Usage: python bench/bench_jobs.py [--jobs N] [--rounds R] [--databases sqlite,postgres]
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

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc

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


async def enqueue_rate(address: str, count: int, prefix: str = "enq") -> float:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.JobServiceStub(channel)
        await stub.Enqueue(card(0, f"warm-{prefix}"))
        return await rate(lambda i: stub.Enqueue(card(i, prefix)), count)


ACTIVE_PROBE = pb.ListJobsRequest(
    statuses=[pb.JOB_STATUS_PENDING, pb.JOB_STATUS_PROCESSING], page_size=1
)


async def _completed(stub: pb_grpc.JobServiceStub) -> int:
    stats = await stub.GetJobStats(pb.GetJobStatsRequest())  # type: ignore[misc]  # aio stub
    return sum(c.count for c in stats.counts if c.status == pb.JOB_STATUS_COMPLETED)


async def end_to_end(address: str, count: int, limit: float) -> float:
    """Jobs per second from the first Enqueue until none is active (all COMPLETED)."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.JobServiceStub(channel)
        started = time.perf_counter()
        await rate(lambda i: stub.Enqueue(card(i, "e2e")), count)
        while (await stub.ListJobs(ACTIVE_PROBE)).jobs:
            if time.perf_counter() - started > limit:
                raise RuntimeError(f"end to end: jobs still active after {limit:.0f}s")
            await asyncio.sleep(0.02)
        elapsed = time.perf_counter() - started
        done = await _completed(stub)
        if done != count:
            raise RuntimeError(f"end to end: {done} of {count} jobs COMPLETED")
        return count / elapsed


async def end_to_end_with_feed(address: str, count: int, limit: float) -> float:
    """The same, with a live feed of every COMPLETED job counting the completions."""
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
                if update.job.target_id.startswith("feed-"):
                    done += 1
                    if done >= count:
                        finished.set()
                        feed.cancel()
                        return

        watcher = asyncio.create_task(count_completions())
        await asyncio.sleep(0.3)
        started = time.perf_counter()
        await rate(lambda i: stub.Enqueue(card(i, "feed")), count)
        try:
            await asyncio.wait_for(finished.wait(), limit)
        except TimeoutError:
            print(f"    end to end with a feed: only {done}/{count} COMPLETED within {limit:.0f}s")
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


def _postgres_cpu_seconds() -> float:
    """CPU of every PostgreSQL server process on this machine (0 if there is none)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() == "postgres":
                total += _cpu_seconds(int(entry.name))
        except OSError:  # exited meanwhile
            continue
    return total


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
def measured(
    service: RunningService, phase: str, db: str, others: dict[str, int] | None = None
) -> Iterator[dict[str, float]]:
    """CPU the job-service used during the block (and the machine's busy share, and
    the CPU of `others`: name -> pid, plus PostgreSQL and this process); with
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
    pids = dict(others or {})

    def snapshot() -> dict[str, float]:
        cpu = {name: _cpu_seconds(pid) for name, pid in pids.items()}
        cpu["PostgreSQL"] = _postgres_cpu_seconds()
        cpu["bench client"] = time.process_time()
        return cpu

    cpu, others_before, (busy, total) = _cpu_seconds(service.proc.pid), snapshot(), _machine_busy()
    try:
        yield figures
    finally:
        figures["service_cpu"] = _cpu_seconds(service.proc.pid) - cpu
        for name, after in snapshot().items():
            figures[f"cpu:{name}"] = after - others_before[name]
        busy_after, total_after = _machine_busy()
        figures["machine_busy"] = (busy_after - busy) / max(total_after - total, 1e-9)
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)


def cpu_note(figures: dict[str, float], jobs: int, others: bool = False) -> str:
    per_job = 1000 * figures["service_cpu"] / jobs
    note = f"[job-service CPU {per_job:.2f} ms/job"
    if others:
        for key, seconds in figures.items():
            if key.startswith("cpu:") and seconds > 0.01:
                note += f", {key[4:]} {1000 * seconds / jobs:.2f}"
    return note + f"; machine {100 * figures['machine_busy']:.0f}% busy]"


async def stream_memory(service: RunningService, count: int) -> float:
    """Bytes of job-service RSS per open StreamJobUpdates stream: `count` streams, each
    watching one PENDING job, all open (each has sent its snapshot) at the same time."""
    async with grpc.aio.insecure_channel(service.address) as channel:
        stub = pb_grpc.JobServiceStub(channel)
        ids: list[str] = []
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
            if any(f is grpc.aio.EOF or f.job.status != pb.JOB_STATUS_PENDING for f in firsts):  # type: ignore[attr-defined]
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


def bench_database(
    name: str, database_url: Callable[[], str], jobs: int, rounds: int, work: Path
) -> None:
    print(f"\n== {name} ==")
    db = name.lower()
    # The no-op baseline: a grpc.aio server process answering health checks, nothing else.
    noop = start_service(
        "noop", ["ai-gateway", "--listen", "127.0.0.1:0", "--backend", "instant"], work
    )
    slow_gateway = start_gateway(work, "--backend", "instant", "--fault-latency", "30")
    url = database_url()
    # Enqueue alone: one worker, stuck on a slow gateway, so claims don't compete.
    service = start_job_service(
        work, "--workers", "1", gateway=slow_gateway.address, database_url=url
    )
    noop_rates: list[float] = []
    enqueue_rates: list[float] = []
    enqueue_cpu: list[dict[str, float]] = []
    try:
        # Alternating rounds: both rates see the same machine, round by round.
        for index in range(rounds):
            noop_rates.append(asyncio.run(noop_rate(noop.address, jobs)))
            with measured(service, f"enqueue-{index}", db) as figures:
                enqueue_rates.append(asyncio.run(enqueue_rate(service.address, jobs, f"r{index}")))
            enqueue_cpu.append(figures)
        # Every job here stays PENDING (the one worker waits on the slow gateway).
        per_stream = asyncio.run(stream_memory(service, STREAMS))
    finally:
        service.kill()
        stop(slow_gateway, noop)
    shares = [100 * e / n for e, n in zip(enqueue_rates, noop_rates, strict=True)]
    median_cpu = sorted(enqueue_cpu, key=lambda f: f["service_cpu"])[len(enqueue_cpu) // 2]
    print(
        f"  no-op grpc.aio unary call : {statistics.median(noop_rates):8.0f} calls/s "
        f"({CALLERS} callers; rounds {', '.join(f'{r:.0f}' for r in noop_rates)})"
    )
    each = ", ".join(f"{share:.0f}%" for share in shares)
    print(
        f"  Enqueue                   : {statistics.median(enqueue_rates):8.0f} jobs/s  = "
        f"{statistics.median(shares):.0f}% of no-op (rounds {each})  " + cpu_note(median_cpu, jobs)
    )
    print(
        f"  memory per open stream    : {per_stream / 1024:8.1f} KB "
        f"(job-service RSS growth with {STREAMS} StreamJobUpdates streams open)"
    )

    gateway = start_gateway(work, "--backend", "instant")
    try:
        for label, run in (
            ("end to end (enqueue->COMPLETED)", end_to_end),
            ("end to end, live feed watching", end_to_end_with_feed),
        ):
            results: list[tuple[float, dict[str, float]]] = []
            for index in range(rounds):
                service = start_job_service(
                    work, "--workers", "64", gateway=gateway.address, database_url=database_url()
                )
                try:
                    others = {"gateway": gateway.proc.pid}
                    with measured(service, f"{label[:10]}-{index}", db, others) as figures:
                        per_s = asyncio.run(run(service.address, jobs, 120))
                    results.append((per_s, figures))
                finally:
                    stop(service)
            results.sort(key=lambda r: r[0])
            per_s, figures = results[len(results) // 2]
            print(
                f"  {label}: {per_s:8.0f} jobs/s ({jobs} jobs, instant gateway; rounds "
                f"{', '.join(f'{r:.0f}' for r, _ in results)})\n      "
                + cpu_note(figures, jobs, others=True)
            )
        service = start_job_service(work, gateway=gateway.address, database_url=database_url())
        try:
            p50, p99 = asyncio.run(pickup_latency(service.address, 200))
            print(
                f"  pickup latency (commit->PROCESSING), light load: "
                f"p50 {p50:.1f} ms, p99 {p99:.1f} ms"
            )
        finally:
            stop(service)
    finally:
        stop(gateway)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3, help="rounds per throughput figure")
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
        each_database(
            args.databases,
            work,
            lambda name, fresh: bench_database(name, fresh, args.jobs, args.rounds, work),
        )


def each_database(
    databases: str, work: Path, bench: Callable[[str, Callable[[], str]], None]
) -> None:
    """`bench(name, fresh)` on SQLite and PostgreSQL (as `databases` names them), where
    `fresh()` gives a new database each call (a file in `work`; a migrated PostgreSQL
    database, dropped afterwards). PostgreSQL unreachable: said, and skipped."""
    if "sqlite" in databases:
        counter = iter(range(10_000))
        bench("SQLite", lambda: f"sqlite+aiosqlite:///{work / f'jobs-{next(counter)}.db'}")
    if "postgres" in databases:
        reason = require_postgres()
        if reason:
            print(f"\n== PostgreSQL: skipped ({reason}) ==")
            return
        made: list[str] = []

        def fresh() -> str:
            made.append(create_temp_postgres_database())
            return made[-1]

        try:
            bench("PostgreSQL", fresh)
        finally:
            for url in made:
                drop_database(url)


if __name__ == "__main__":
    main()
