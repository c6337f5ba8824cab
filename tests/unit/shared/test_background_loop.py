"""BackgroundLoop (san_jobs/shared/background.py): a body that raises is logged, naming
the loop, and run again; stop() ends it, and stopping twice or before start is fine."""

from __future__ import annotations

import asyncio
import logging

import pytest

from san_jobs.shared.background import BackgroundLoop


async def test_a_crash_is_logged_and_the_body_runs_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runs = 0
    again = asyncio.Event()

    async def body() -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise KeyError("a bug in one pass")
        again.set()
        await asyncio.sleep(3600)

    loop = BackgroundLoop("schedule-firer", body, restart_after=0.01)
    with caplog.at_level(logging.ERROR, logger="san_shared.background"):
        loop.start()
        await asyncio.wait_for(again.wait(), 5)
    assert loop.running and loop.crashes == 1 and runs == 2
    (record,) = caplog.records
    assert "background loop schedule-firer failed (1 times)" in record.getMessage()
    assert record.exc_info is not None and isinstance(record.exc_info[1], KeyError)
    await loop.stop()
    assert not loop.running
    await loop.stop()  # twice: nothing


async def test_stop_before_start_and_a_body_that_ends() -> None:
    done = asyncio.Event()

    async def body() -> None:
        done.set()

    loop = BackgroundLoop("once", body)
    await loop.stop()
    loop.start()
    await asyncio.wait_for(done.wait(), 5)
    await asyncio.sleep(0)
    assert not loop.running and loop.crashes == 0
    await loop.stop()
