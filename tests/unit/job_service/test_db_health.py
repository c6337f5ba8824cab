"""The database health monitor (san_jobs.job_service.db_health) with a fake store: readiness
goes down when the database stops answering (refused or silent) and back up by
itself, reported once per change, logged once per change."""

from __future__ import annotations

import asyncio
import logging

import pytest

from san_jobs.job_service.db_health import MAX_TIMEOUT, DatabaseHealth
from san_jobs.job_service.domain.errors import StorageUnavailableError


class FakeStore:
    """ping() answers, refuses, or never answers, as told."""

    def __init__(self) -> None:
        self.state = "up"  # "up", "refusing", "silent"
        self.pings = 0

    async def ping(self) -> None:
        self.pings += 1
        if self.state == "refusing":
            raise StorageUnavailableError("database unavailable: ConnectionRefusedError")
        if self.state == "silent":
            await asyncio.Event().wait()  # until cancelled by the monitor's timeout


class Readiness:
    def __init__(self) -> None:
        self.changes: list[bool] = []

    async def set(self, ready: bool) -> None:
        self.changes.append(ready)


def _monitor(store: FakeStore, readiness: Readiness, interval: float = 0.01) -> DatabaseHealth:
    return DatabaseHealth(store, readiness.set, interval=interval)


async def test_reports_only_changes_and_logs_one_line_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, readiness = FakeStore(), Readiness()
    monitor = _monitor(store, readiness)
    caplog.set_level(logging.INFO, "job_service.db_health")
    assert await monitor.check() is True
    assert readiness.changes == []  # it starts ready: nothing to report
    store.state = "refusing"
    for _ in range(3):
        assert await monitor.check() is False
    assert readiness.changes == [False] and not monitor.ready
    store.state = "up"
    for _ in range(3):
        assert await monitor.check() is True
    assert readiness.changes == [False, True] and monitor.ready
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2, messages
    assert messages[0].startswith("database unreachable (database unavailable: Connection")
    assert caplog.records[0].levelno == logging.WARNING
    assert not caplog.records[0].exc_info  # a StorageError needs no traceback
    assert messages[1].startswith("database answers again after ")


async def test_a_silent_database_is_down_once_the_check_times_out() -> None:
    store, readiness = FakeStore(), Readiness()
    monitor = DatabaseHealth(store, readiness.set, interval=0.01, timeout=0.01)
    store.state = "silent"
    assert await monitor.check() is False
    assert readiness.changes == [False]
    assert not monitor.ready


async def test_the_timeout_is_at_most_the_interval_and_max_timeout() -> None:
    store, readiness = FakeStore(), Readiness()
    assert _monitor(store, readiness, interval=0.5).timeout == 0.5
    assert _monitor(store, readiness, interval=60).timeout == MAX_TIMEOUT


async def test_a_bug_in_the_check_counts_as_down_and_shows_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken:
        async def ping(self) -> None:
            raise RuntimeError("bug")

    readiness = Readiness()
    monitor = DatabaseHealth(Broken(), readiness.set, interval=1)
    caplog.set_level(logging.WARNING, "job_service.db_health")
    assert await monitor.check() is False
    assert readiness.changes == [False]
    assert caplog.records[0].exc_info is not None


async def test_runs_in_the_background_until_stopped() -> None:
    store, readiness = FakeStore(), Readiness()
    monitor = _monitor(store, readiness)
    monitor.start()
    store.state = "refusing"
    await _until(lambda: readiness.changes == [False])
    store.state = "up"
    await _until(lambda: readiness.changes == [False, True])
    await monitor.stop()
    pings = store.pings
    store.state = "refusing"
    await asyncio.sleep(0.05)
    assert store.pings == pings and readiness.changes == [False, True]


async def test_interval_zero_checks_nothing() -> None:
    store, readiness = FakeStore(), Readiness()
    monitor = _monitor(store, readiness, interval=0)
    monitor.start()
    await asyncio.sleep(0.02)
    await monitor.stop()
    assert store.pings == 0


async def _until(condition: object, within: float = 5.0) -> None:
    assert callable(condition)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not condition():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)
