"""Issue 13, point 5: pause, don't fail. Real ai-gateway and job-service processes
(tests/support/outage_run.py).

1. Outage: 300 jobs arrive at 5/s (`--max-attempts 3 --retry-base-delay 1`); the
   gateway is killed (-9) 5 s in and restarted on the same port 60 s later. Goal:
   0 FAILED, at most 15 attempts charged with UNAVAILABLE, every job COMPLETED
   within 10 s of the gateway's return.
2. Seed experiment: 100 jobs (enqueued at 50/s) against a gateway answering 50 % of
   calls UNAVAILABLE (`--fault-unavailable-rate 0.5`, fixed seed), with the breaker
   and without it (`--breaker-failures 1000000`: never opens). Goal: every job
   finishes (terminal), with the breaker in at most twice the time without it.

3. Shared rate limit (point 6): three job-services on one fresh PostgreSQL database
   with `--rate-limit CARD_ANALYSIS=20/s`, 400 jobs enqueued at once. Goal: at most
   22 starts (gateway calls) in any one-second window, the run about 20 s.
4. Fair share (point 7): `--workers 10 --max-running-per-caller 5`, a caller with a
   5,000-job backlog (the gateway takes 0.2 s a call: 50 jobs/s, 100 s to drain), then
   another caller enqueues 10. Goal: the second caller's jobs all complete within 5 s
   while the backlog is still draining.

Prints failed jobs, attempts charged with UNAVAILABLE, recovery time (last COMPLETED
minus the gateway's return) and the seed runs' times; the most starts in any second
and the run time under the shared limit; the second caller's completion time. Takes
about 4 minutes.

Usage: python bench/bench_outage.py [--database-url URL] [--outage 60] [--jobs 300]
                                    [--sections outage,limits]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # bench scripts run from a checkout: reuse the test helpers

from tests.support.databases import create_temp_postgres_database, drop_database  # noqa: E402
from tests.support.limits_run import run_fair_share, run_limited  # noqa: E402
from tests.support.outage_run import OutageFigures, run_outage  # noqa: E402

GOAL_FLAGS = ("--max-attempts", "3", "--retry-base-delay", "1")
NO_BREAKER = ("--breaker-failures", "1000000")


def show(title: str, f: OutageFigures) -> None:
    recovery = "-" if f.recovery_seconds is None else f"{f.recovery_seconds:.1f} s"
    print(
        f"{title:<28}: {f.jobs} jobs, {f.completed} COMPLETED, {f.failed} FAILED; "
        f"attempts charged UNAVAILABLE {f.charged_unavailable} "
        f"(transient {f.charged_transient}); recovery {recovery}; "
        f"run {f.elapsed_seconds:.1f} s",
        flush=True,
    )


async def main(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-outage-"))
    sections = set(args.sections.split(","))
    if "outage" in sections:
        await outage_sections(work, args)
    if "limits" in sections:
        await limits_sections(work)


async def limits_sections(work: Path) -> None:
    database = create_temp_postgres_database()  # the instances share it
    try:
        limited = await run_limited(
            work / "rate-limit",
            jobs=400,
            job_service_args=("--rate-limit", "CARD_ANALYSIS=20/s"),
            database_url=database,
            instances=3,
        )
    finally:
        drop_database(database)
    print(
        f"rate limit 20/s, 3 instances : {limited.jobs} jobs, {limited.completed} COMPLETED; "
        f"gateway calls {limited.gateway_calls}; max starts in any 1 s window "
        f"{limited.max_per_second}; starts spread over {limited.start_span_seconds:.1f} s; "
        f"run {limited.elapsed_seconds:.1f} s",
        flush=True,
    )
    ok = limited.max_per_second <= 22 and 18 <= limited.start_span_seconds <= 22
    print(f"  goal (<= 22 calls in any second, about 20 s): {'met' if ok else 'NOT met'}")

    fair = await run_fair_share(
        work / "fair-share",
        big_jobs=5000,
        small_jobs=10,
        job_service_args=("--workers", "10", "--max-running-per-caller", "5"),
        gateway_args=("--fault-latency", "0.2"),
    )
    print(
        f"fair share, 5 per caller      : second caller's {fair.small_jobs} jobs "
        f"({fair.small_completed} COMPLETED) done in {fair.small_seconds:.2f} s; "
        f"first caller's backlog left then {fair.big_left} of {fair.big_jobs}",
        flush=True,
    )
    ok = fair.small_completed == fair.small_jobs and fair.small_seconds <= 5 and fair.big_left > 0
    print(
        f"  goal (second caller done within 5 s, backlog still draining): "
        f"{'met' if ok else 'NOT met'}"
    )


async def outage_sections(work: Path, args: argparse.Namespace) -> None:
    outage = await run_outage(
        work / "outage",
        jobs=args.jobs,
        rate=5,
        outage_at=5,
        outage_seconds=args.outage,
        job_service_args=GOAL_FLAGS,
        database_url=args.database_url,
        finish_timeout=args.outage + 180,
    )
    show(f"outage {args.outage:g} s, {args.jobs} jobs", outage)
    ok = (
        outage.failed == 0
        and outage.charged_unavailable <= 15
        and outage.recovery_seconds is not None
        and outage.recovery_seconds <= 10
    )
    print(f"  goal (0 FAILED, <= 15 charged, recovery <= 10 s): {'met' if ok else 'NOT met'}")

    faults = ("--fault-unavailable-rate", "0.5", "--fault-seed", "13")
    runs = {}
    for name, flags in (("with breaker", ()), ("without breaker", NO_BREAKER)):
        runs[name] = await run_outage(
            work / name.replace(" ", "-"),
            jobs=100,
            rate=50,
            outage_at=None,
            outage_seconds=0,
            job_service_args=(*GOAL_FLAGS, *flags),
            gateway_args=faults,
            database_url=args.database_url,
            finish_timeout=600,
        )
        show(f"seed, 50% UNAVAILABLE, {name}", runs[name])
    ratio = runs["with breaker"].elapsed_seconds / runs["without breaker"].elapsed_seconds
    print(f"  seed time with / without breaker: {ratio:.2f} (goal <= 2)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=None, help="default: a SQLite file")
    parser.add_argument("--outage", type=float, default=60.0, help="seconds")
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument(
        "--sections", default="outage,limits", help="outage (1, 2) and/or limits (3, 4)"
    )
    asyncio.run(main(parser.parse_args()))
