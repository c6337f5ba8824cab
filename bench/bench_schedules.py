"""Schedules across instances (issue 25 part 3, the goal in full): a 1 s interval
schedule on three job-service processes sharing one PostgreSQL database for --seconds
(30 by default), the second instance killed -9 half-way. Prints the periods fired,
jobs per period (a doubled period would show 2), the periods missing between the
first and the last, skipped_count, which instance fired how many, and how late each
job was created after its period's start (p50/p99/max).

Usage: python bench/bench_schedules.py [--seconds S]
The acceptance test (tests/acceptance/job_service/test_schedules_ha.py) runs the
same routine for 9 s.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from tests.support.databases import (  # noqa: E402
    create_temp_postgres_database,
    drop_database,
    require_postgres,
)
from tests.support.schedule_ha import run_ha  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    reason = require_postgres()
    if reason is not None:
        sys.exit(f"PostgreSQL needed: {reason}")
    url = create_temp_postgres_database()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            run = asyncio.run(run_ha(Path(tmp), url, args.seconds))
    finally:
        drop_database(url)
    late = run.late_seconds
    print(
        f"schedule of 1 s on 3 PostgreSQL instances for {args.seconds:g} s, 'b' killed -9 half-way"
    )
    first, last = run.periods[0], run.periods[-1]
    print(f"periods fired: {len(run.periods)} ({first:%H:%M:%S} .. {last:%H:%M:%S} UTC)")
    print(f"jobs per period: max {max(run.per_period.values())} (1 = none doubled)")
    print(f"periods missing between the first and the last: {len(run.missing)}")
    print(f"skipped_count: {run.skipped_count}")
    print(f"fired by instance: {dict(sorted(run.fired_by.items()))}")
    if late:
        p99 = late[min(len(late) - 1, int(len(late) * 0.99))]
        print(
            "job created after its period's start:"
            f" p50 {statistics.median(late) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms,"
            f" max {late[-1] * 1000:.0f} ms"
        )
    ok = max(run.per_period.values()) == 1 and not run.missing
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
