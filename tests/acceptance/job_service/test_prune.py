"""Retention against real processes on one PostgreSQL database: two job-service
instances prune together (each old job deleted once, by one of them), the advisory
lock keeps prunes apart (PruneJobs is ABORTED while another holds it), and
`jobsctl prune --dry-run` / `jobsctl prune` show and do the right thing.

The finished jobs are written straight into the table, hours old, so the counts are
exact and no gateway has to run them; the services are the real console scripts.
Every wait polls for a state with a deadline, none for a time.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import asyncpg
import pytest

from san_jobs.job_service.storage.notify import asyncpg_dsn
from san_jobs.job_service.storage.prune import PRUNE_LOCK_KEY
from tests.support.processes import running, start_job_service

pytestmark = [pytest.mark.acceptance, pytest.mark.postgres]

JOBSCTL = str(Path(sys.executable).parent / "jobsctl")
NO_GATEWAY = "127.0.0.1:1"  # no job is ever PENDING-and-due here: nothing calls it
PRUNED = re.compile(r"pruned (\d+) jobs past retention: COMPLETED=(\d+) FAILED=(\S+)")


async def seed(conn: asyncpg.Connection, status: str, count: int, age: str) -> None:
    """`count` jobs of a terminal `status` that ended `age` ago (a PostgreSQL interval)."""
    end_column = {"COMPLETED": "completed_at", "FAILED": "failed_at", "CANCELLED": "cancelled_at"}
    await conn.execute(
        "INSERT INTO async_jobs (id, job_type, status, target_id, request_params, attempts,"
        f" max_attempts, created_at, updated_at, {end_column[status]})"
        " SELECT gen_random_uuid()::text, 'CARD_ANALYSIS', $1::text, $1::text || '-' || i,"
        " '{}'::jsonb, '[]'::jsonb, 3, now() - $2::text::interval, now() - $2::text::interval,"
        " now() - $2::text::interval"
        " FROM generate_series(1, $3) AS i",
        status,
        age,
        count,
    )


async def counts(conn: asyncpg.Connection) -> dict[str, int]:
    rows = await conn.fetch("SELECT status, count(*) AS n FROM async_jobs GROUP BY status")
    return {row["status"]: row["n"] for row in rows}


@pytest.fixture
async def db(postgres_database: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(asyncpg_dsn(postgres_database))
    yield conn
    await conn.close()


async def poll(check: Callable[[], Awaitable[bool]], what: str, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


def jobsctl(target: str, *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SAN_JOBSCTL_")}
    return subprocess.run(
        [JOBSCTL, "--target", target, *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env={**clean, "COLUMNS": "200"},
    )


async def test_two_instances_delete_every_old_job_once(
    tmp_path: Path, postgres_database: str, db: asyncpg.Connection
) -> None:
    flags = ["--retain-completed", "1s", "--retain-cancelled", "1s", "--prune-interval", "0.5"]
    a = start_job_service(
        tmp_path, *flags, "--instance-id", "a", gateway=NO_GATEWAY, database_url=postgres_database
    )
    with running(a):
        b = start_job_service(
            tmp_path,
            *flags,
            "--instance-id",
            "b",
            gateway=NO_GATEWAY,
            database_url=postgres_database,
        )
        with running(b):
            # Written once both instances run: their next turns race for these.
            await seed(db, "COMPLETED", 2_500, "1 hour")  # three batches of at most 1,000
            await seed(db, "FAILED", 40, "1 hour")  # kept: --retain-failed stays 30 days
            await seed(db, "CANCELLED", 30, "1 hour")
            await db.execute(
                "INSERT INTO async_jobs (id, job_type, status, target_id, request_params, attempts,"
                " max_attempts, created_at, updated_at, due_at, next_attempt_at)"
                " VALUES (gen_random_uuid()::text, 'CARD_ANALYSIS', 'PENDING', 'old-pending',"
                " '{}'::jsonb, '[]'::jsonb, 3, now() - interval '1 day', now() - interval '1 day',"
                " now() + interval '1 day', now() + interval '1 day')"
            )

            async def pruned() -> bool:
                return "COMPLETED" not in await counts(db) and "CANCELLED" not in await counts(db)

            await poll(pruned, "the old COMPLETED and CANCELLED jobs to be deleted")

            def report() -> tuple[list[str], int]:
                lines = [
                    line for s in (a, b) for line in s.log().splitlines() if PRUNED.search(line)
                ]
                return lines, sum(int(PRUNED.search(line).group(1)) for line in lines)  # type: ignore[union-attr]

            async def reported() -> bool:
                return report()[1] >= 2_500 + 30

            # A run logs its count once its last batch is deleted: wait for the lines
            # before stopping the instances (a stop between the two lost them once, on
            # a loaded machine, and the test read a total of 0).
            await poll(reported, "the pruned jobs to be reported")
    # Each deleted job is counted by the one instance that deleted it.
    lines, total = report()
    assert total == 2_500 + 30, "\n".join(lines)
    assert all("FAILED=0" in line for line in lines), lines
    assert await counts(db) == {"FAILED": 40, "PENDING": 1}
    for service in (a, b):
        assert " ERROR " not in service.log(), service.log_tail()


async def test_jobsctl_prune_dry_run_then_prune(
    tmp_path: Path, postgres_database: str, db: asyncpg.Connection
) -> None:
    await seed(db, "COMPLETED", 12, "2 days")
    await seed(db, "COMPLETED", 5, "1 minute")  # younger than --retain-completed
    await seed(db, "FAILED", 3, "2 days")  # --retain-failed off: kept
    await seed(db, "CANCELLED", 4, "2 days")
    flags = ["--retain-completed", "1d", "--retain-failed", "off", "--retain-cancelled", "36h"]
    # The test holds the pruners' lock, as another instance would, until it has seen
    # this instance's own loop skip its first turn (DEBUG line): then nothing else
    # deletes before the test's `jobsctl prune`, and the next turn is an hour away.
    held = await db.fetchval("SELECT pg_try_advisory_lock($1)", PRUNE_LOCK_KEY)
    assert held
    service = start_job_service(
        tmp_path,
        *flags,
        "--prune-interval",
        "3600",
        "--log-level",
        "DEBUG",
        gateway=NO_GATEWAY,
        database_url=postgres_database,
    )
    with running(service):
        target = service.address

        dry = jobsctl(target, "prune", "--dry-run", "--json")
        assert dry.returncode == 0, dry.stderr
        body = json.loads(dry.stdout)
        assert body["dryRun"] is True
        by_status = {c["status"]: c for c in body["counts"]}
        assert [c["status"] for c in body["counts"]] == ["COMPLETED", "FAILED", "CANCELLED"]
        assert (by_status["COMPLETED"]["count"], by_status["COMPLETED"]["more"]) == (12, False)
        assert by_status["COMPLETED"]["retentionSeconds"] == 86_400
        assert by_status["FAILED"]["retentionSeconds"] is None
        assert by_status["FAILED"]["cutoffTime"] is None and by_status["FAILED"]["count"] == 0
        assert by_status["CANCELLED"]["count"] == 4
        assert by_status["CANCELLED"]["retentionSeconds"] == 36 * 3600

        table = jobsctl(target, "prune", "--dry-run")
        assert table.returncode == 0, table.stderr
        assert "COMPLETED" in table.stdout and "1d" in table.stdout and "36h" in table.stdout
        assert "kept forever" in table.stdout and "16 jobs would be deleted" in table.stdout

        # Another instance prunes now: refused in one line, nothing deleted.
        busy = jobsctl(target, "prune", "--yes")
        assert busy.returncode == 6, busy.stderr
        assert busy.stderr.count("\n") == 1 and "ABORTED" in busy.stderr
        assert "a prune is running" in busy.stderr

        async def skipped() -> bool:
            return "prune skipped: another prune holds the lock" in service.log()

        await poll(skipped, "the pruner's first turn")
        await db.execute("SELECT pg_advisory_unlock($1)", PRUNE_LOCK_KEY)

        # No terminal to confirm on: one line, exit 2, nothing deleted.
        unconfirmed = jobsctl(target, "prune")
        assert unconfirmed.returncode == 2, unconfirmed.stderr
        assert "--yes" in unconfirmed.stderr and unconfirmed.stderr.count("\n") == 1
        assert await counts(db) == {"COMPLETED": 17, "FAILED": 3, "CANCELLED": 4}

        done = jobsctl(target, "prune", "--yes", "--json")
        assert done.returncode == 0, done.stderr
        deleted = {c["status"]: c["count"] for c in json.loads(done.stdout)["counts"]}
        assert deleted == {"COMPLETED": 12, "FAILED": 0, "CANCELLED": 4}
        assert await counts(db) == {"COMPLETED": 5, "FAILED": 3}
        assert "pruned 16 jobs past retention: COMPLETED=12 FAILED=kept CANCELLED=4" in (
            service.log()
        )
        assert "PruneJobs by" in service.log()
