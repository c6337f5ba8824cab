"""bench/bench_fanout.py --quick on SQLite: the whole run works end to end (BatchEnqueue,
a backlog built with dispatch held and drained to all COMPLETED, every table row and
a PASS/MISS verdict per goal). Figures are not judged here: they are the bench's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_fanout.py"

pytestmark = pytest.mark.acceptance

ROWS = (
    "no-op grpc.aio unary call",
    "Enqueue, single calls",
    "BatchEnqueue, batches of 500",
    "end to end, single calls",
    "backlog built (BatchEnqueue)",
    "backlog drained",
    "job-service RSS, drain",
    "pickup latency, light load",
)
GOALS = (
    "BatchEnqueue / single Enqueue",
    "end to end / no-op",
    "backlog drain / end to end",
    "job-service RSS after drain / before",
    "pickup latency p50/p99",
)


def test_quick_run_prints_every_row_and_a_verdict_per_goal() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--databases", "sqlite"],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for row in ROWS:
        assert re.search(rf"^  {re.escape(row)}\s*:", out, re.MULTILINE), (row, out)
    for goal in GOALS:
        assert re.search(rf"^  (PASS|MISS)  {re.escape(goal)}", out, re.MULTILINE), (goal, out)
    assert "procrastinate" not in out  # PostgreSQL only
