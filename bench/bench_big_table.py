"""Operator queries and the end-to-end rate with a big table of finished jobs (PostgreSQL).

Issue 14: with ten million finished jobs, GetJobStats under 50 ms, a RetryFailed dry
run filtered by type and time under 200 ms, ListJobs with filters fast, and the
end-to-end rate within 10 % of the empty table's. In one run this script:

1. creates two fresh databases on the server (dropped at the end unless --keep):
   "empty", migrated to the latest schema, and "big", migrated to the revision before
   0009 (the counts and indexes for big tables);
2. loads --rows finished jobs into "big" in SQL (INSERT ... SELECT FROM
   generate_series, a chunk of a million rows per statement: 85 % COMPLETED, 12 %
   FAILED with four kinds of error message, 3 % CANCELLED, four job types, 50
   callers, two million targets, created over the last 6 days, each with an attempt
   record) and prints how long that took; then migrates it to the latest schema
   (timing 0009, whose trigger backfill counts the table, and the rest) and runs
   VACUUM ANALYZE, as autovacuum would after such a load;
3. starts one real ai-gateway (instant backend) and a real job-service per database,
   and times each operator query over gRPC, the median of --runs calls after one
   warm-up, on the empty and the big table side by side;
4. measures the end-to-end rate (--jobs jobs enqueued by 64 callers until all are
   COMPLETED), alternating empty and big for --rounds rounds, and prints the medians
   and the big table's rate as a share of the empty one's.

With --trigger-cost, a third database (empty, without the count triggers) joins the
end-to-end rounds: what keeping the counts costs the queue.

Usage: python bench/bench_big_table.py [--rows 10000000] [--postgres-url URL]
           [--jobs 5000] [--rounds 3] [--runs 5] [--keep] [--big-url URL]
           [--trigger-cost]
The load takes about a minute per million rows on a 2-core machine; each million rows
takes about 0.8 GB of disk with its indexes.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from sqlalchemy import make_url

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # bench scripts run from a checkout: reuse the test helpers

from bench.bench_jobs import ACTIVE_PROBE, card, rate  # noqa: E402
from san_jobs.job_service.storage.migrate import migrate  # noqa: E402
from san_jobs.job_service.storage.notify import asyncpg_dsn  # noqa: E402
from tests.support.databases import (  # noqa: E402
    create_temp_postgres_database,
    drop_database,
    require_postgres,
)
from tests.support.processes import RunningService, start_gateway, start_job_service  # noqa: E402

BEFORE_COUNTS = "0008"  # the revision before 0009 (counts and indexes for big tables)
CHUNK = 1_000_000
# Inside the default retention (--retain-completed 7d): the pruner deletes none of them.
DAYS = 6

# One statement per chunk [$1, $2) of $3 rows in all, created over DAYS days up to an
# hour ago. Job type and status come from different digits of g, so every (type,
# status) pair occurs.
LOAD_SQL = f"""
INSERT INTO async_jobs (
    id, job_type, status, target_id, request_params, requested_by, result,
    error_message, error_code, error_reason, attempt_count, max_attempts, attempts,
    created_at, updated_at, started_at, completed_at, failed_at, cancelled_at,
    cancel_reason
)
SELECT
    md5('big-' || g)::uuid::text,
    (ARRAY['CARD_ANALYSIS', 'CARD_ANALYSIS', 'CARD_ANALYSIS', 'CARD_ANALYSIS',
           'TIL_GENERATION', 'TIL_GENERATION', 'TIL_GENERATION',
           'RECALL_GENERATION', 'RECALL_GENERATION', 'EMBEDDING'])[1 + (g / 7) % 10],
    s.status,
    'target-' || (g % 2000000),
    jsonb_build_object('text', 'Durable queues keep work safe. Workers claim jobs with leases.'),
    'caller-' || (g % 50),
    CASE WHEN s.status = 'COMPLETED' THEN
        '{{"summary": "Queues keep work safe.", "tags": ["queues"], "score": 0.82}}'::jsonb
    END,
    CASE WHEN s.status = 'FAILED' THEN (ARRAY[
        'gateway call timed out after 30s',
        'AI provider refused: quota exceeded for model small-1',
        'invalid input: text has ' || (g % 9000 + 1000) || ' characters, at most 8000',
        'upstream answered 503 Service Unavailable'])[1 + (g / 3) % 4]
    END,
    CASE WHEN s.status = 'FAILED' THEN (ARRAY[
        'DEADLINE_EXCEEDED', 'RESOURCE_EXHAUSTED', 'INVALID_ARGUMENT', 'UNAVAILABLE'
    ])[1 + (g / 3) % 4] END,
    CASE WHEN s.status = 'FAILED' THEN 'GATEWAY_ERROR' END,
    CASE WHEN s.status = 'FAILED' THEN 3 ELSE 1 END,
    3,
    jsonb_build_array(jsonb_build_object(
        'attempt', 1,
        'start_time', to_char(s.started AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'),
        'end_time', to_char(s.ended AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'),
        'error_code', '', 'error_reason', '', 'error_message', '',
        'usage', jsonb_build_object('model', 'small-1', 'input_tokens', 120 + g % 300,
                                    'output_tokens', 40 + g % 80,
                                    'duration_seconds', 0.4, 'cached', false))),
    s.created,
    s.ended,
    s.started,
    CASE WHEN s.status = 'COMPLETED' THEN s.ended END,
    CASE WHEN s.status = 'FAILED' THEN s.ended END,
    CASE WHEN s.status = 'CANCELLED' THEN s.ended END,
    CASE WHEN s.status = 'CANCELLED' THEN 'cancelled by an operator' END
FROM generate_series($1::bigint, $2::bigint - 1) AS g
CROSS JOIN LATERAL (
    SELECT
        CASE WHEN g % 100 < 85 THEN 'COMPLETED' WHEN g % 100 < 97 THEN 'FAILED'
             ELSE 'CANCELLED' END AS status,
        $4::timestamptz + (interval '{DAYS} days') * (g::float8 / $3) AS created,
        $4::timestamptz + (interval '{DAYS} days') * (g::float8 / $3)
            + interval '100 milliseconds' AS started,
        $4::timestamptz + (interval '{DAYS} days') * (g::float8 / $3)
            + interval '2 seconds' AS ended
) AS s
"""


def ts(moment: datetime) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(moment)
    return stamp


async def load(url: str, rows: int) -> None:
    start = datetime.now(UTC) - timedelta(days=DAYS, hours=1)
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        for low in range(0, rows, CHUNK):
            high = min(rows, low + CHUNK)
            began = time.perf_counter()
            await conn.execute(LOAD_SQL, low, high, rows, start)
            print(f"    rows {low:>10,} .. {high:>10,}: {time.perf_counter() - began:6.1f} s")
    finally:
        await conn.close()


async def sql(url: str, statement: str) -> None:
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


def timed(step: Callable[[], Awaitable[object]]) -> float:
    began = time.perf_counter()
    asyncio.run(step())  # type: ignore[arg-type]
    return time.perf_counter() - began


def queries(
    now: datetime,
) -> list[tuple[str, Callable[[pb_grpc.JobServiceStub], Awaitable[object]]]]:
    """The operator queries timed: (label, call)."""
    day_ago, two_days_ago = ts(now - timedelta(days=1)), ts(now - timedelta(days=2))
    three_days_ago = ts(now - timedelta(days=3))
    embedding, til = pb.JOB_TYPE_EMBEDDING, pb.JOB_TYPE_TIL_GENERATION
    return [
        ("GetJobStats", lambda s: s.GetJobStats(pb.GetJobStatsRequest())),
        (
            "RetryFailed dry run: 1 type, failed in a 1-day range",
            lambda s: s.RetryFailed(
                pb.RetryFailedRequest(
                    job_types=[embedding],
                    failed_after=two_days_ago,
                    failed_before=day_ago,
                    dry_run=True,
                )
            ),
        ),
        (
            "RetryFailed dry run: 2 types, failed in the last 3 days",
            lambda s: s.RetryFailed(
                pb.RetryFailedRequest(
                    job_types=[embedding, til], failed_after=three_days_ago, dry_run=True
                )
            ),
        ),
        (
            "RetryFailed dry run: 1 type + error text, last day",
            lambda s: s.RetryFailed(
                pb.RetryFailedRequest(
                    job_types=[til],
                    error_message_contains="quota exceeded",
                    failed_after=day_ago,
                    dry_run=True,
                )
            ),
        ),
        (
            "ListJobs FAILED of 1 type, page of 50",
            lambda s: s.ListJobs(
                pb.ListJobsRequest(
                    statuses=[pb.JOB_STATUS_FAILED], job_types=[embedding], page_size=50
                )
            ),
        ),
        (
            "ListJobs CANCELLED created in the last 3 days, 50",
            lambda s: s.ListJobs(
                pb.ListJobsRequest(
                    statuses=[pb.JOB_STATUS_CANCELLED], created_after=three_days_ago, page_size=50
                )
            ),
        ),
        (
            "ListJobs one target",
            lambda s: s.ListJobs(pb.ListJobsRequest(target_id="target-12345", page_size=50)),
        ),
        (
            "ListJobs error text, created in the last day, 50",
            lambda s: s.ListJobs(
                pb.ListJobsRequest(
                    error_message_contains="503", created_after=day_ago, page_size=50
                )
            ),
        ),
        ("ListJobs PENDING+PROCESSING (none), 1", lambda s: s.ListJobs(ACTIVE_PROBE)),
    ]


async def time_queries(address: str, runs: int, now: datetime) -> dict[str, float]:
    """Median milliseconds of each query, after one warm-up call."""
    medians: dict[str, float] = {}
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.JobServiceStub(channel)
        for label, call in queries(now):
            await call(stub)
            times = []
            for _ in range(runs):
                began = time.perf_counter()
                await call(stub)
                times.append(1000 * (time.perf_counter() - began))
            medians[label] = statistics.median(times)
    return medians


async def completed(stub: pb_grpc.JobServiceStub) -> int:
    stats = await stub.GetJobStats(pb.GetJobStatsRequest())
    return sum(c.count for c in stats.counts if c.status == pb.JOB_STATUS_COMPLETED)


async def end_to_end(
    address: str, count: int, prefix: str, counted: bool = True, limit: float = 300.0
) -> float:
    """Jobs per second from the first Enqueue until none is active (all COMPLETED:
    checked with GetJobStats where the counts are kept, `counted`)."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.JobServiceStub(channel)
        before = await completed(stub)
        started = time.perf_counter()
        await rate(lambda i: stub.Enqueue(card(i, prefix)), count)
        while (await stub.ListJobs(ACTIVE_PROBE)).jobs:
            if time.perf_counter() - started > limit:
                raise RuntimeError(f"end to end: jobs still active after {limit:.0f}s")
            await asyncio.sleep(0.02)
        elapsed = time.perf_counter() - started
        done = await completed(stub) - before
        if counted and done != count:
            raise RuntimeError(f"end to end: {done} of {count} jobs COMPLETED")
        return count / elapsed


COUNTED = ("empty", "big")  # the third database keeps no counts: GetJobStats says 0
NO_COUNT_TRIGGERS = (
    "DROP TRIGGER tr_async_jobs_count_insert ON async_jobs;"
    " DROP TRIGGER tr_async_jobs_count_update ON async_jobs;"
    " DROP TRIGGER tr_async_jobs_count_delete ON async_jobs"
)


def prepare_big(url: str, rows: int) -> None:
    print(f"== PostgreSQL, {rows:,} finished jobs ==")
    asyncio.run(migrate(url, BEFORE_COUNTS))
    began = time.perf_counter()
    asyncio.run(load(url, rows))
    print(f"  load: {time.perf_counter() - began:.1f} s")
    print(
        f"  migrate 0009 (triggers + count backfill + 3 indexes CONCURRENTLY): "
        f"{timed(lambda: migrate(url, '0009')):.1f} s"
    )
    print(f"  migrate to head (after 0009): {timed(lambda: migrate(url)):.1f} s")
    print(f"  VACUUM ANALYZE: {timed(lambda: sql(url, 'VACUUM ANALYZE async_jobs')):.1f} s")


def compare(databases: dict[str, str], args: argparse.Namespace) -> None:
    """Queries on "empty" and "big", then end-to-end rounds over every database."""
    services: list[RunningService] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            gateway = start_gateway(work, "--backend", "instant")
            services.append(gateway)
            running: dict[str, RunningService] = {}
            for name, url in databases.items():
                running[name] = start_job_service(
                    work, "--workers", "64", gateway=gateway.address, database_url=url
                )
                services.append(running[name])

            now = datetime.now(UTC)
            on_empty = asyncio.run(time_queries(running["empty"].address, args.runs, now))
            on_big = asyncio.run(time_queries(running["big"].address, args.runs, now))
            print(
                f"\n  {'query (median of ' + str(args.runs) + ' over gRPC)':<58}"
                f"{'empty':>9} {'big':>10}"
            )
            for label, empty_ms in on_empty.items():
                print(f"  {label:<58}{empty_ms:7.1f} ms {on_big[label]:7.1f} ms")

            rates: dict[str, list[float]] = {name: [] for name in running}
            for index in range(args.rounds):
                for name, service in running.items():
                    per_s = asyncio.run(
                        end_to_end(service.address, args.jobs, f"e2e-{index}", name in COUNTED)
                    )
                    rates[name].append(per_s)
            print(
                f"\n  end to end (enqueue -> COMPLETED, {args.jobs} jobs, 64 callers, "
                f"instant gateway, rounds alternating):"
            )
            empty_rate = statistics.median(rates["empty"])
            for name, per_round in rates.items():
                median = statistics.median(per_round)
                print(
                    f"    {name:<27}: {median:7.0f} jobs/s (rounds "
                    f"{', '.join(f'{r:.0f}' for r in per_round)}) = "
                    f"{100 * median / empty_rate:.0f}% of the empty table's"
                )
    finally:
        for service in reversed(services):
            service.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="finished jobs to load")
    parser.add_argument(
        "--postgres-url",
        default=None,
        help="the PostgreSQL server to create the databases on "
        "(default: SAN_TEST_POSTGRES_URL or postgres@127.0.0.1:5432)",
    )
    parser.add_argument("--jobs", type=int, default=5_000, help="jobs per end-to-end round")
    parser.add_argument("--rounds", type=int, default=3, help="end-to-end rounds per table")
    parser.add_argument("--runs", type=int, default=5, help="timed calls per query")
    parser.add_argument("--keep", action="store_true", help="keep the databases (and say so)")
    parser.add_argument(
        "--big-url",
        default=None,
        help="reuse a big database kept by an earlier run (--keep): no load; never dropped",
    )
    parser.add_argument(
        "--trigger-cost",
        action="store_true",
        help="add an empty database without the count triggers to the end-to-end rounds "
        "(what counting costs the queue)",
    )
    args = parser.parse_args()
    reason = require_postgres(args.postgres_url)
    if reason is not None:
        print(f"bench_big_table: {reason}", file=sys.stderr)
        raise SystemExit(2)

    made: list[str] = []
    try:
        databases = {"empty": create_temp_postgres_database(args.postgres_url)}
        made.append(databases["empty"])
        if args.big_url is None:
            big_url = create_temp_postgres_database(args.postgres_url, migrated=False)
            made.append(big_url)
            prepare_big(big_url, args.rows)
        else:
            big_url = args.big_url
            print(f"== PostgreSQL, the big database given ({make_url(big_url).database}) ==")
        databases["big"] = big_url
        if args.trigger_cost:
            databases["empty, no count triggers"] = create_temp_postgres_database(args.postgres_url)
            made.append(databases["empty, no count triggers"])
            asyncio.run(sql(databases["empty, no count triggers"], NO_COUNT_TRIGGERS))
        compare(databases, args)
    finally:
        if args.keep:
            print("\n  kept: " + "\n        ".join(made))
        else:
            for url in made:
                drop_database(url)


if __name__ == "__main__":
    main()
