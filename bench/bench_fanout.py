"""Issue 15's figures in one run: BatchEnqueue and backlog drain beside the single calls.

Real processes on loopback, per database (SQLite, PostgreSQL), in alternating rounds
(the median is shown, each round's figure beside it), one table:
- the no-op grpc.aio unary rate (a health Check, 64 callers) and the single-call
  Enqueue rate (64 callers), as bench_jobs.py measures them;
- BatchEnqueue, batches of 500, 4 callers (each with one batch in flight: a few
  producers, as the daily fan-out has; more only queue on the service's one loop),
  jobs/s and the ratio to that round's single-call Enqueue rate (goal >= 10x);
- on PostgreSQL, procrastinate's batch defer (`Task.batch_defer_async`) on the same
  server, its own temporary database, same batch size and callers, run by
  bench/procrastinate_defer.py under --procrastinate-python (goal: BatchEnqueue >= it);
- single-call end to end (Enqueue -> COMPLETED through an instant gateway) and its
  share of the no-op rate (goal >= 50 %);
- draining a backlog (--backlog jobs) with the instant gateway: the backlog is built
  with BatchEnqueue by a job-service started with `--rate-limit CARD_ANALYSIS=0.001/s`
  (its bucket holds one token, so at most a job or two start; nothing else is
  claimed, no retries, no breaker), which is then stopped (SIGTERM); a job-service
  with normal settings (--workers as the end-to-end figure) is started on the same
  database and timed from health SERVING until no job is PENDING or PROCESSING (a
  ListJobs probe every 0.1 s), then every job is checked COMPLETED. The jobs already
  COMPLETED when the clock starts are not counted. Goal: >= 2x the single-call
  end-to-end rate of the same run. CPU per job per process during the drain;
- the drain's job-service RSS at SERVING and 1 s after the last job ended (goal: after
  within 20 % of before, in every round), and its peak during the drain;
- pickup latency (commit -> PROCESSING) at light load, p50/p99 (goal <= 5 / 50 ms).

Each goal line says PASS or MISS with the figure and the goal.

Usage: python bench/bench_fanout.py [--rounds 3] [--databases sqlite,postgres]
           [--backlog 100000] [--procrastinate-python /tmp/procvenv/bin/python]
           [--profile DIR] [--quick]
Bounded: every phase has a job count and a time limit; it stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import bench_jobs  # bench/ is sys.path[0] when this script runs
import grpc
from bench_jobs import (
    CALLERS,
    ROOT,
    card,
    cpu_note,
    each_database,
    end_to_end,
    enqueue_rate,
    measured,
    noop_rate,
    pickup_latency,
    rate,
    stop,
)
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy import make_url

from san_jobs.job_service.storage.notify import asyncpg_dsn
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from tests.support.databases import create_temp_postgres_database, drop_database
from tests.support.processes import RunningService, start_gateway, start_job_service, start_service

T = TypeVar("T")

BATCH_SIZE = 500
BATCH_CALLERS = 4
# The backlog's builder: one token in the bucket, one more every 1,000 s.
HOLD_DISPATCH = ("--rate-limit", "CARD_ANALYSIS=0.001/s")
DRAIN_PROBE_SECONDS = 0.1
SETTLE_SECONDS = 1.0
PROCRASTINATE_SCRIPT = Path(__file__).resolve().parent / "procrastinate_defer.py"
ACTIVE_PROBE = pb.ListJobsRequest(
    statuses=[pb.JOB_STATUS_PENDING, pb.JOB_STATUS_PROCESSING], page_size=1
)


@dataclass
class Sizes:
    """Job counts of one run (--quick makes them small)."""

    jobs: int  # single-call Enqueue and end to end, per round
    batch_jobs: int  # BatchEnqueue and procrastinate, per round
    backlog: int
    pickup: int
    workers: int


@dataclass
class Figures:
    """One database's figures, a list per measure with one value per round."""

    rounds: dict[str, list[float]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)

    def add(self, key: str, value: float) -> None:
        self.rounds.setdefault(key, []).append(value)

    def median(self, key: str) -> float:
        return statistics.median(self.rounds[key])


def limit_for(jobs: int) -> float:
    """A phase's time limit: slower than 100 jobs/s (or a minute) is a failure."""
    return max(60.0, jobs / 100)


def run(coro: Awaitable[T], limit: float) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, limit)

    return asyncio.run(bounded())


def _batch(prefix: str, start: int, size: int, count: int) -> pb.BatchEnqueueRequest:
    return pb.BatchEnqueueRequest(
        requests=[card(i, prefix) for i in range(start, min(start + size, count))]
    )


def _item_errors(response: Any) -> list[str]:
    return [
        f"{r.error.code}: {r.error.message}"
        for r in response.results
        if r.WhichOneof("outcome") != "response"
    ]


async def batch_enqueue_rate(address: str, count: int, prefix: str) -> float:
    """Jobs/s of BatchEnqueue: `count` card jobs in batches of BATCH_SIZE, BATCH_CALLERS
    batches in flight. The client builds each batch in the timed window, as the
    single-call figure builds each request. Any item error fails the phase."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub: Any = pb_grpc.JobServiceStub(channel)
        errors: list[str] = []

        async def send(index: int) -> None:
            response = await stub.BatchEnqueue(
                _batch(prefix, index * BATCH_SIZE, BATCH_SIZE, count)
            )
            errors.extend(_item_errors(response))

        await stub.BatchEnqueue(_batch(f"warm-{prefix}", 0, BATCH_SIZE, BATCH_SIZE))
        batches = -(-count // BATCH_SIZE)
        per_s = await rate(send, batches, BATCH_CALLERS) * count / batches
        if errors:
            raise RuntimeError(f"BatchEnqueue: {len(errors)} item errors, first {errors[0]}")
        return per_s


async def build_backlog(address: str, count: int) -> float:
    """The backlog, with BatchEnqueue (no warm-up batch: every job is the backlog's)."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub: Any = pb_grpc.JobServiceStub(channel)
        errors: list[str] = []

        async def send(index: int) -> None:
            response = await stub.BatchEnqueue(
                _batch("backlog", index * BATCH_SIZE, BATCH_SIZE, count)
            )
            errors.extend(_item_errors(response))

        batches = -(-count // BATCH_SIZE)
        per_s = await rate(send, batches, BATCH_CALLERS) * count / batches
        if errors:
            raise RuntimeError(f"backlog: {len(errors)} item errors, first {errors[0]}")
        return per_s


async def wait_serving(address: str) -> None:
    """Until the job-service's readiness (health san.jobs.v1.JobService) is SERVING."""
    async with grpc.aio.insecure_channel(address) as channel:
        health: Any = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service="san.jobs.v1.JobService")
        while True:
            with_status = await health.Check(request)
            if with_status.status == health_pb2.HealthCheckResponse.SERVING:
                return
            await asyncio.sleep(0.01)


async def _completed(stub: Any) -> int:
    stats = await stub.GetJobStats(pb.GetJobStatsRequest())
    return sum(int(c.count) for c in stats.counts if c.status == pb.JOB_STATUS_COMPLETED)


@dataclass
class Drain:
    per_s: float
    drained: int
    peak_rss: int


async def drain_backlog(address: str, backlog: int, pid: int, limit: float) -> Drain:
    """Jobs/s from now until no job is PENDING or PROCESSING, then all must be COMPLETED."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub: Any = pb_grpc.JobServiceStub(channel)
        started = time.perf_counter()
        done_before = await _completed(stub)
        peak = bench_jobs._rss_bytes(pid)
        while (await stub.ListJobs(ACTIVE_PROBE)).jobs:
            if time.perf_counter() - started > limit:
                raise RuntimeError(f"drain: jobs still active after {limit:.0f}s")
            peak = max(peak, bench_jobs._rss_bytes(pid))
            await asyncio.sleep(DRAIN_PROBE_SECONDS)
        elapsed = time.perf_counter() - started
        done = await _completed(stub)
        if done != backlog:
            raise RuntimeError(f"drain: {done} of {backlog} jobs COMPLETED")
        return Drain((backlog - done_before) / elapsed, backlog - done_before, peak)


def procrastinate_rate(python: str, jobs: int) -> float:
    """procrastinate's batch defer on its own temporary database of the same server."""
    url = create_temp_postgres_database(migrated=False)
    try:
        dsn = asyncpg_dsn(make_url(url))
        done = subprocess.run(
            [
                python,
                str(PROCRASTINATE_SCRIPT),
                "--dsn",
                dsn,
                "--jobs",
                str(jobs),
                "--batch",
                str(BATCH_SIZE),
                "--callers",
                str(BATCH_CALLERS),
            ],
            capture_output=True,
            text=True,
            timeout=limit_for(jobs),
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"procrastinate_defer.py failed:\n{done.stderr[-3000:]}")
        return float(json.loads(done.stdout.strip().splitlines()[-1])["jobs_per_s"])
    finally:
        drop_database(url)


def calls_rounds(
    figures: Figures,
    db: str,
    database_url: Callable[[], str],
    sizes: Sizes,
    rounds: int,
    work: Path,
    procrastinate: str | None,
) -> None:
    """No-op, single Enqueue, BatchEnqueue (and procrastinate), alternating by round."""
    noop = start_service(
        "noop", ["ai-gateway", "--listen", "127.0.0.1:0", "--backend", "instant"], work
    )
    # Enqueue alone: one worker, stuck on a slow gateway, so claims don't compete
    # (bench_jobs.py's setting, so the single-call figure is the same one).
    slow_gateway = start_gateway(work, "--backend", "instant", "--fault-latency", "30")
    service = start_job_service(
        work, "--workers", "1", gateway=slow_gateway.address, database_url=database_url()
    )
    try:
        for index in range(rounds):
            figures.add("noop", run(noop_rate(noop.address, sizes.jobs), limit_for(sizes.jobs)))
            with measured(service, f"enqueue-{index}", db) as cpu:
                single = run(
                    enqueue_rate(service.address, sizes.jobs, f"r{index}"), limit_for(sizes.jobs)
                )
            figures.add("enqueue", single)
            figures.add("enqueue_cpu", 1000 * cpu["service_cpu"] / sizes.jobs)
            with measured(service, f"batch-{index}", db, {}) as cpu:
                batch = run(
                    batch_enqueue_rate(service.address, sizes.batch_jobs, f"b{index}"),
                    limit_for(sizes.batch_jobs),
                )
            figures.add("batch", batch)
            figures.add("batch_cpu", 1000 * cpu["service_cpu"] / sizes.batch_jobs)
            if db == "postgresql":
                figures.add("batch_pg_cpu", 1000 * cpu["cpu:PostgreSQL"] / sizes.batch_jobs)
            if procrastinate is not None:
                figures.add("procrastinate", procrastinate_rate(procrastinate, sizes.batch_jobs))
    finally:
        service.kill()
        stop(slow_gateway, noop)


def _own(cpu: dict[str, float], db: str) -> dict[str, float]:
    """The CPU figures without PostgreSQL's on SQLite: there it is other work's."""
    return cpu if db == "postgresql" else {k: v for k, v in cpu.items() if k != "cpu:PostgreSQL"}


def drain_round(
    figures: Figures,
    db: str,
    index: int,
    url: str,
    gateway: RunningService,
    sizes: Sizes,
    work: Path,
) -> None:
    """Build the backlog with dispatch held, then time a normal job-service draining it."""
    builder = start_job_service(work, *HOLD_DISPATCH, gateway=gateway.address, database_url=url)
    try:
        figures.add("backlog_build", run(build_backlog(builder.address, sizes.backlog), 600))
    finally:
        stop(builder)
    service = start_job_service(
        work, "--workers", str(sizes.workers), gateway=gateway.address, database_url=url
    )
    try:
        run(wait_serving(service.address), 60)
        before = bench_jobs._rss_bytes(service.proc.pid)
        others = {"gateway": gateway.proc.pid}
        with measured(service, f"drain-{index}", db, others) as cpu:
            drain = run(
                drain_backlog(
                    service.address, sizes.backlog, service.proc.pid, limit_for(sizes.backlog)
                ),
                limit_for(sizes.backlog) + 60,
            )
        time.sleep(SETTLE_SECONDS)
        after = bench_jobs._rss_bytes(service.proc.pid)
    finally:
        stop(service)
    figures.add("drain", drain.per_s)
    figures.add("rss_before", before / 2**20)
    figures.add("rss_after", after / 2**20)
    figures.add("rss_peak", drain.peak_rss / 2**20)
    figures.add("rss_ratio", after / before)
    figures.notes[f"drain_cpu_{index}"] = cpu_note(_own(cpu, db), drain.drained, True)


def end_to_end_rounds(
    figures: Figures,
    db: str,
    database_url: Callable[[], str],
    sizes: Sizes,
    rounds: int,
    work: Path,
) -> None:
    """Single-call end to end, the backlog drain and pickup latency, round by round."""
    gateway = start_gateway(work, "--backend", "instant")
    try:
        for index in range(rounds):
            service = start_job_service(
                work,
                "--workers",
                str(sizes.workers),
                gateway=gateway.address,
                database_url=database_url(),
            )
            try:
                with measured(service, f"e2e-{index}", db, {"gateway": gateway.proc.pid}) as cpu:
                    per_s = asyncio.run(end_to_end(service.address, sizes.jobs, 120))
            finally:
                stop(service)
            figures.add("e2e", per_s)
            figures.notes[f"e2e_cpu_{index}"] = cpu_note(_own(cpu, db), sizes.jobs, True)
            drain_round(figures, db, index, database_url(), gateway, sizes, work)
            service = start_job_service(work, gateway=gateway.address, database_url=database_url())
            try:
                p50, p99 = run(pickup_latency(service.address, sizes.pickup), 120)
            finally:
                stop(service)
            figures.add("pickup_p50", p50)
            figures.add("pickup_p99", p99)
    finally:
        stop(gateway)


def _each(values: list[float], fmt: str = "{:.0f}") -> str:
    return ", ".join(fmt.format(v) for v in values)


def _median_round(values: list[float]) -> int:
    """The index of the round whose value is the median (the lower one of two)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    return order[(len(order) - 1) // 2]


def goal(ok: bool, what: str, figure: str, target: str) -> str:
    return f"  {'PASS' if ok else 'MISS'}  {what}: {figure} (goal {target})"


def print_table(name: str, figures: Figures, sizes: Sizes, procrastinate: str | None) -> None:
    r, m = figures.rounds, figures.median
    ratio_single = [100 * e / n for e, n in zip(r["enqueue"], r["noop"], strict=True)]
    ratio_batch = [b / e for b, e in zip(r["batch"], r["enqueue"], strict=True)]
    ratio_e2e = [100 * e / n for e, n in zip(r["e2e"], r["noop"], strict=True)]
    ratio_drain = [d / e for d, e in zip(r["drain"], r["e2e"], strict=True)]
    print(f"\n== {name}: the table (median of {len(r['noop'])} rounds; each round in brackets) ==")
    print(
        f"  no-op grpc.aio unary call        : {m('noop'):8.0f} calls/s ({CALLERS} callers) "
        f"[{_each(r['noop'])}]"
    )
    print(
        f"  Enqueue, single calls            : {m('enqueue'):8.0f} jobs/s  = "
        f"{statistics.median(ratio_single):.0f}% of no-op [{_each(r['enqueue'])}; "
        f"{_each(ratio_single, '{:.0f}%')}]  job-service {m('enqueue_cpu'):.2f} ms/job"
    )
    print(
        f"  BatchEnqueue, batches of {BATCH_SIZE}     : {m('batch'):8.0f} jobs/s  = "
        f"{statistics.median(ratio_batch):.1f}x single [{_each(r['batch'])}; "
        f"{_each(ratio_batch, '{:.1f}x')}]  ({BATCH_CALLERS} callers, {sizes.batch_jobs} jobs; "
        f"job-service {m('batch_cpu'):.3f} ms/job"
        + (f", PostgreSQL {m('batch_pg_cpu'):.3f})" if "batch_pg_cpu" in r else ")")
    )
    if "procrastinate" in r:
        print(
            f"  procrastinate batch_defer_async  : {m('procrastinate'):8.0f} jobs/s  "
            f"[{_each(r['procrastinate'])}] (batches of {BATCH_SIZE}, {BATCH_CALLERS} callers, "
            "same server, its own database)"
        )
    elif name == "PostgreSQL":
        print(
            "  procrastinate batch_defer_async  : not measured (--procrastinate-python not given)"
        )
    print(
        f"  end to end, single calls         : {m('e2e'):8.0f} jobs/s  = "
        f"{statistics.median(ratio_e2e):.0f}% of no-op [{_each(r['e2e'])}; "
        f"{_each(ratio_e2e, '{:.0f}%')}]  ({sizes.jobs} jobs, --workers {sizes.workers})"
    )
    e2e_round = _median_round(r["e2e"])
    print(f"      {figures.notes[f'e2e_cpu_{e2e_round}']}")
    print(
        f"  backlog built (BatchEnqueue)     : {m('backlog_build'):8.0f} jobs/s  "
        f"[{_each(r['backlog_build'])}] ({sizes.backlog} jobs, dispatch held)"
    )
    print(
        f"  backlog drained                  : {m('drain'):8.0f} jobs/s  = "
        f"{statistics.median(ratio_drain):.1f}x end to end [{_each(r['drain'])}; "
        f"{_each(ratio_drain, '{:.1f}x')}]  ({sizes.backlog} jobs, --workers {sizes.workers})"
    )
    drain_round_index = _median_round(r["drain"])
    print(f"      {figures.notes[f'drain_cpu_{drain_round_index}']}")
    print(
        f"  job-service RSS, drain           : before {m('rss_before'):.0f} MB, after "
        f"{m('rss_after'):.0f} MB = {m('rss_ratio'):.2f}x, peak {m('rss_peak'):.0f} MB "
        f"[after/before {_each(r['rss_ratio'], '{:.2f}x')}]"
    )
    print(
        f"  pickup latency, light load       : p50 {m('pickup_p50'):.1f} ms, p99 "
        f"{m('pickup_p99'):.1f} ms [p50 {_each(r['pickup_p50'], '{:.1f}')}; p99 "
        f"{_each(r['pickup_p99'], '{:.1f}')}] ({sizes.pickup} jobs, one every 20 ms)"
    )
    print(f"  goals ({name}):")
    batch_x = statistics.median(ratio_batch)
    print(goal(batch_x >= 10, "BatchEnqueue / single Enqueue", f"{batch_x:.1f}x", ">= 10x"))
    if "procrastinate" in r:
        ours, theirs = m("batch"), m("procrastinate")
        print(
            goal(
                ours >= theirs,
                "BatchEnqueue / procrastinate batch defer",
                f"{ours:.0f} / {theirs:.0f} jobs/s = {ours / theirs:.2f}x",
                ">= 1x",
            )
        )
    e2e_share = statistics.median(ratio_e2e)
    print(goal(e2e_share >= 50, "end to end / no-op", f"{e2e_share:.0f}%", ">= 50%"))
    drain_x = statistics.median(ratio_drain)
    print(goal(drain_x >= 2, "backlog drain / end to end", f"{drain_x:.1f}x", ">= 2x"))
    worst = max(r["rss_ratio"])
    print(
        goal(
            worst <= 1.2,
            "job-service RSS after drain / before (worst round)",
            f"{worst:.2f}x",
            "<= 1.20x",
        )
    )
    p50, p99 = m("pickup_p50"), m("pickup_p99")
    print(
        goal(
            p50 <= 5 and p99 <= 50,
            "pickup latency p50/p99",
            f"{p50:.1f}/{p99:.1f} ms",
            "<= 5/50 ms",
        )
    )


def bench_database(
    name: str,
    database_url: Callable[[], str],
    sizes: Sizes,
    rounds: int,
    work: Path,
    procrastinate: str | None,
) -> None:
    print(f"\n== {name} == (load average at start {_load()})", flush=True)
    db = name.lower()
    figures = Figures()
    calls_rounds(figures, db, database_url, sizes, rounds, work, procrastinate)
    print("  calls measured; end to end, drain and pickup next", flush=True)
    end_to_end_rounds(figures, db, database_url, sizes, rounds, work)
    print_table(name, figures, sizes, procrastinate)
    print(f"  (load average at end {_load()})", flush=True)


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def _revision() -> str:
    git = ["git", "-C", str(ROOT)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True)
    return head.stdout.strip() + (" + uncommitted changes" if dirty.stdout.strip() else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="single calls per round")
    parser.add_argument("--batch-jobs", type=int, default=50_000, help="batched jobs per round")
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--pickup", type=int, default=200, help="jobs for pickup latency")
    parser.add_argument(
        "--workers", type=int, default=64, help="job-service --workers (e2e, drain)"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--databases", default="sqlite,postgres")
    parser.add_argument(
        "--procrastinate-python",
        metavar="PATH",
        help="an interpreter with procrastinate installed (python3 -m venv /tmp/procvenv && "
        "/tmp/procvenv/bin/pip install procrastinate); absent: not measured",
    )
    parser.add_argument(
        "--profile", type=Path, metavar="DIR", help="py-spy flame graphs of the job-service"
    )
    parser.add_argument("--quick", action="store_true", help="small counts, one round (smoke)")
    args = parser.parse_args()
    if args.quick:
        sizes = Sizes(jobs=300, batch_jobs=2_000, backlog=2_000, pickup=20, workers=args.workers)
        args.rounds = 1
    else:
        sizes = Sizes(args.jobs, args.batch_jobs, args.backlog, args.pickup, args.workers)
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
        bench_jobs.PROFILE_DIR = args.profile
    print(
        f"bench_fanout at {_revision()}; {os.cpu_count()} CPUs, load average {_load()}; "
        f"rounds {args.rounds}; single calls {sizes.jobs}, batched {sizes.batch_jobs}, "
        f"backlog {sizes.backlog} per round"
    )
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        each_database(
            args.databases,
            work,
            lambda name, fresh: bench_database(
                name,
                fresh,
                sizes,
                args.rounds,
                work,
                args.procrastinate_python if name == "PostgreSQL" else None,
            ),
        )


if __name__ == "__main__":
    main()
