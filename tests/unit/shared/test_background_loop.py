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


async def test_stop_without_cancel_lets_the_pass_under_way_end() -> None:
    stopping = False
    in_pass = asyncio.Event()
    finish_pass = asyncio.Event()
    passes_ended = 0

    async def body() -> None:
        nonlocal passes_ended
        while not stopping:
            in_pass.set()
            await finish_pass.wait()  # a cancel here would leave the pass half done
            passes_ended += 1

    loop = BackgroundLoop("producer", body)
    loop.start()
    await asyncio.wait_for(in_pass.wait(), 5)
    stopping = True
    stop = asyncio.create_task(loop.stop(cancel=False))
    await asyncio.sleep(0.01)
    assert not stop.done()  # waits for the pass: no cancel
    finish_pass.set()
    await asyncio.wait_for(stop, 5)
    assert passes_ended == 1 and not loop.running


async def test_stop_without_cancel_cuts_a_crash_pause_short() -> None:
    runs = 0
    crashing = asyncio.Event()

    async def body() -> None:
        nonlocal runs
        runs += 1
        crashing.set()
        raise KeyError("a bug")

    loop = BackgroundLoop("producer", body, restart_after=3600)
    loop.start()
    await asyncio.wait_for(crashing.wait(), 5)
    await asyncio.sleep(0)  # the crash is logged; the pause begins
    assert loop.crashes == 1
    await asyncio.wait_for(loop.stop(cancel=False), 5)  # not after an hour
    assert runs == 1 and not loop.running
