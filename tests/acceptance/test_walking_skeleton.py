"""The README's run command, end to end: `scripts/run.py` (what `make run` runs)
starts the real services; jobsctl enqueues, gets and watches a job that AiGateway
really summarises; the job is a row in `async_jobs` on SQLite; Ctrl-C stops all."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.acceptance

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TEXT = (
    "Durable queues keep work safe across crashes. A worker claims a job with a lease. "
    "If the worker dies, the lease expires and another worker takes the job. "
    "Operators retry failed jobs after an outage with one command."
)


def jobsctl(target: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "jobsctl"), "--target", target, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_run_command_serves_the_whole_path(tmp_path: Path) -> None:
    database = tmp_path / "jobs.db"
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "SAN_GATEWAY_LISTEN": "127.0.0.1:0",
        "SAN_JOBS_LISTEN": "127.0.0.1:0",
        "SAN_WEB_LISTEN": "127.0.0.1:0",
        # make run serves metrics on fixed ports; any free ones here.
        "SAN_GATEWAY_METRICS_LISTEN": "127.0.0.1:0",
        "SAN_JOBS_METRICS_LISTEN": "127.0.0.1:0",
        "SAN_WEB_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'web.db'}",
        "SAN_JOBS_DATABASE_URL": f"sqlite+aiosqlite:///{database}",
        # Slow enough that `get` and `watch` see the job move, even when each jobsctl
        # run takes a second or two to start on a machine busy with other tests.
        "SAN_GATEWAY_FAULT_LATENCY": "6",
    }
    log = tmp_path / "run.log"
    with log.open("w") as out:
        run = subprocess.Popen(
            [sys.executable, str(ROOT / "scripts" / "run.py")],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        deadline = time.monotonic() + 60
        target = None
        while time.monotonic() < deadline and target is None:
            match = re.search(r"JobService \(gRPC\)\s+(\S+)", log.read_text())
            target = match.group(1) if match else None
            assert run.poll() is None, log.read_text()
            time.sleep(0.1)
        assert target, log.read_text()
        assert "AiGateway  (gRPC)" in log.read_text()
        for service in ("AiGateway ", "JobService"):
            assert re.search(
                service + r" \(HTTP\)  http://127\.0\.0\.1:\d+/metrics  Prometheus metrics",
                log.read_text(),
            ), log.read_text()

        enqueued = jobsctl(
            target, "enqueue", "card-analysis", "--target-id", "scrap-1", "--text", TEXT
        )
        assert enqueued.returncode == 0, enqueued.stderr
        job_id = enqueued.stdout.strip()
        assert re.fullmatch(r"[0-9a-f-]{36}", job_id)

        got = jobsctl(target, "get", job_id)
        assert got.returncode == 0
        assert re.search(r"status\s+(PENDING|PROCESSING)", got.stdout), got.stdout

        watched = jobsctl(target, "watch", job_id)
        assert watched.returncode == 0, watched.stderr
        states = re.findall(r"\s(PENDING|PROCESSING|COMPLETED)\s", watched.stdout)
        assert states[0] == "PENDING" and states[-1] == "COMPLETED", watched.stdout
        assert states.index("PENDING") < states.index("PROCESSING") < states.index("COMPLETED")
        summary = re.search(r"summary: (.+)", watched.stdout)
        assert summary and "lease" in summary.group(1), watched.stdout

        got = jobsctl(target, "--json", "get", job_id)
        assert got.returncode == 0, got.stderr
        as_json = json.loads(got.stdout)
        assert (as_json["id"], as_json["status"]) == (job_id, "JOB_STATUS_COMPLETED"), got.stdout

        with sqlite3.connect(database) as db:
            row = db.execute(
                "SELECT job_type, status, target_id, attempt_count FROM async_jobs WHERE id = ?",
                (job_id,),
            ).fetchone()
        assert row == ("CARD_ANALYSIS", "COMPLETED", "scrap-1", 1)
        # Both services logged the job: JobService its outcome, AiGateway its call.
        logged = log.read_text()
        assert f"job_id={job_id} completed: CARD_ANALYSIS attempt 1/" in logged, logged
        assert re.search(rf"job={job_id} attempt=1 status=OK\b", logged), logged
    finally:
        run.send_signal(signal.SIGINT)
        code = run.wait(60)
    text = log.read_text()
    assert code == 0, text
    assert "stopped: ai-gateway (exit 0), job-service (exit 0), san-web (exit 0)" in text, text
