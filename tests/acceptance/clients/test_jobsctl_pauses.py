"""jobsctl shows dispatch pauses: a "Paused" table in `stats` (and `paused` in its
JSON), and a waiting job's reason in `get` and `watch`. Real ai-gateway and
job-service processes; the pause is opened through the store, as another instance's
breaker would."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from conftest import Stack, _stack
from test_jobsctl import enqueue_card, jobsctl

from san_jobs.job_service.domain.dispatch import DispatchPause, PauseReason
from san_jobs.job_service.domain.model import JobType
from san_jobs.job_service.domain.ports import OpenPauseParams
from san_jobs.job_service.storage.repository import SqlJobStore

pytestmark = pytest.mark.acceptance

LAST_ERROR = "AI gateway unavailable: connection refused"


@pytest.fixture(scope="module")
def waiting_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Every gateway call fails UNAVAILABLE; a failed job's retry is a minute away, so
    it stays PENDING for the whole test."""
    yield from _stack(
        tmp_path_factory.mktemp("pause-stack"),
        ["--fault-unavailable-rate", "1.0"],
        ["--max-attempts", "5", "--retry-base-delay", "60", "--retry-max-delay", "60"],
    )


def database_url(stack: Stack) -> str:
    return f"sqlite+aiosqlite:///{stack.log_dir / 'jobs.db'}"


def open_pause(database_url: str) -> DispatchPause:
    """Open a CIRCUIT_OPEN pause of CARD_ANALYSIS (next probe in 10 minutes) in the
    service's database, as another instance's breaker would."""

    async def open_it() -> DispatchPause:
        store = SqlJobStore(database_url, instance_id="other-instance")
        try:
            return await store.pauses.open_pause(
                OpenPauseParams(
                    job_type=JobType.CARD_ANALYSIS,
                    reason=PauseReason.CIRCUIT_OPEN,
                    until=datetime.now(UTC) + timedelta(minutes=10),
                    last_error=LAST_ERROR,
                    instance_id="other-instance",
                )
            )
        finally:
            await store.close()

    return asyncio.run(open_it())


def _poll(what: str, check: object, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within:g}s: {what}")
        time.sleep(0.1)


def _job(target: str, job_id: str) -> dict[str, object]:
    result = jobsctl(target, "get", job_id, "--json")
    assert result.returncode == 0, result.stderr
    job: dict[str, object] = json.loads(result.stdout)
    return job


def test_stats_get_and_watch_say_what_is_paused(waiting_stack: Stack) -> None:
    target = waiting_stack.address
    job_id = enqueue_card(target, "scrap-paused")
    _poll("the first attempt failed", lambda: _job(target, job_id).get("attemptCount") == 1)
    assert "Paused" not in jobsctl(target, "stats").stdout
    assert json.loads(jobsctl(target, "stats", "--json").stdout)["paused"] == []

    open_pause(database_url(waiting_stack))

    _poll("stats shows the pause", lambda: "Paused" in jobsctl(target, "stats").stdout, 5)
    table = jobsctl(target, "stats").stdout
    paused_rows = table[table.index("Paused") :]
    assert "CARD_ANALYSIS" in paused_rows and "CIRCUIT_OPEN" in paused_rows
    assert LAST_ERROR in paused_rows
    (paused,) = json.loads(jobsctl(target, "stats", "--json").stdout)["paused"]
    assert paused["jobType"] == "CARD_ANALYSIS" and paused["reason"] == "CIRCUIT_OPEN"
    assert paused["lastError"] == LAST_ERROR
    assert paused["since"].endswith("Z") and paused["until"] > paused["since"]

    _poll("get --json shows the wait", lambda: "waitingFor" in _job(target, job_id), 5)
    waiting = _job(target, job_id)["waitingFor"]
    assert isinstance(waiting, dict) and waiting["reason"] == "PAUSE_REASON_CIRCUIT_OPEN"
    shown = jobsctl(target, "get", job_id).stdout
    assert "waiting" in shown
    assert f"unavailable since {paused['since']}" in shown
    assert LAST_ERROR in shown

    watched = jobsctl(target, "watch", job_id, "--wait-timeout", "2")
    pending_line = next(line for line in watched.stdout.splitlines() if "PENDING" in line)
    assert f"waiting: the AI provider has been unavailable since {paused['since']}" in (
        pending_line
    )
