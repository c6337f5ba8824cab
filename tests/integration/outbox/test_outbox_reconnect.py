"""The outbox relay notices JobService's return by its channel, not by its own
backoff (issue 22, point 16), on SQLite and PostgreSQL; and a JobService that
answers "away" on a live connection is not probed in a loop.

The end-to-end figure (san-web's relay, 20 scraps, a 20 s outage) is
tests/acceptance/clients/test_web_outbox_reconnect.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from san_jobs.client import outbox as outbox_module
from san_jobs.client.outbox import Outbox
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from tests.integration.outbox.outbox_support import Stack, wait_for

# The relay's first pause while JobService is away, with the base backoff raised to
# this: 10 to 20 s, far longer than the wait below.
LONG_PAUSE = 20.0


def card_request(target_id: str) -> pb.EnqueueRequest:
    return pb.EnqueueRequest(
        job_type=pb.JOB_TYPE_CARD_ANALYSIS,
        target_id=target_id,
        card_analysis_input=pb.CardAnalysisInput(text=f"Some page text about {target_id}."),
        requested_by="outbox-test",
    )


@asynccontextmanager
async def relay(stack: Stack, **options: Any) -> AsyncIterator[Outbox]:
    outbox = Outbox(stack.app_engine, stack.client, poll_interval=0.05, **options)
    await outbox.start()
    try:
        yield outbox
    finally:
        await outbox.stop()


async def add_row(stack: Stack, outbox: Outbox, target_id: str) -> str:
    async with stack.app_engine.begin() as conn:
        return await outbox.add(conn, card_request(target_id))


async def test_a_long_pause_ends_when_job_service_is_back(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbox_module, "_BASE_BACKOFF", LONG_PAUSE)
    await stack.proxy_down()
    async with relay(stack, max_backoff=LONG_PAUSE) as outbox:
        row_id = await add_row(stack, outbox, "scrap-back")

        async def tried() -> bool:
            entry = await outbox.entry(row_id)
            return entry is not None and entry.error is not None

        await wait_for(tried)  # the relay is paused now, for 10 to 20 s
        await stack.proxy_up()

        async def delivered() -> bool:
            entry = await outbox.entry(row_id)
            return entry is not None and entry.state == "delivered"

        # The channel reconnects within its backoff (at most 2 s plus jitter).
        await wait_for(delivered, within=6.0)
    assert stack.proxy.calls[row_id] == 1


async def test_job_service_answering_away_on_a_live_connection_is_not_probed_in_a_loop(
    stack: Stack,
) -> None:
    # Every answer is "too late" (DEADLINE_EXCEEDED, a pause code) while the
    # connection stays up: the channel never changes state, so only the relay's own
    # backoff may end its pauses.
    stack.proxy.lose_answers = 1_000_000
    async with relay(stack, max_backoff=0.5) as outbox:
        row_id = await add_row(stack, outbox, "scrap-away")
        await asyncio.sleep(2.0)  # the condition under test: two seconds of pauses
        probes = stack.proxy.calls[row_id]
    # Backoff from 50 ms up to 0.5 s (each a random 50 to 100 %): about 8 probes in 2 s.
    assert 2 <= probes <= 20, probes


async def test_the_row_a_killed_relay_was_probing_with_goes_when_job_service_is_back(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 42, point 8: 20 scraps taken while JobService was down, san-web killed -9
    # and restarted, JobService started: 19 jobs at once, the 20th 16.5 s later. The
    # killed relay's probe call was in flight (a call on a channel whose server just
    # died can hang), so its row kept that relay's lease (twice the call's deadline)
    # and the restarted relay could not send it before the lease ended.
    await stack.proxy_down()
    ids = []
    async with stack.app_engine.begin() as conn:
        adder = Outbox(stack.app_engine, stack.client)  # not started: adds only
        for n in range(20):
            ids.append(await adder.add(conn, card_request(f"scrap-{n}")))

    killed = Outbox(stack.app_engine, stack.client, batch_size=1)  # probing: one row
    in_flight = asyncio.Event()

    async def hanging_send(request: pb.EnqueueRequest) -> pb.EnqueueResponse:
        in_flight.set()
        await asyncio.get_running_loop().create_future()  # never answered
        raise AssertionError("unreachable")

    monkeypatch.setattr(killed, "_send", hanging_send)
    await killed.start()
    await asyncio.wait_for(in_flight.wait(), 5.0)
    task = killed._task
    assert task is not None
    task.cancel()  # kill -9: no stop(), so the row keeps its lease (30 s)
    with contextlib.suppress(asyncio.CancelledError):
        await task
    (killed_row,) = [e.id for e in (await adder.entries(ids)).values() if e.attempts == 1]

    async with relay(stack, max_backoff=0.5) as restarted:

        async def tried() -> bool:
            return sum(bool(e.error) for e in (await restarted.entries(ids)).values()) >= 19

        await wait_for(tried, within=10.0)  # JobService is away for the restarted relay too
        await stack.proxy_up()
        back = time.monotonic()

        async def all_delivered() -> bool:
            found = await restarted.entries(ids)
            return all(e.state == "delivered" for e in found.values())

        # How soon the restarted relay's probe is answered is its channel's reconnect
        # (at most 2 s plus jitter, tested above; 1 to 6 s seen on a loaded machine).
        # Before, the killed relay's row waited for that relay's lease (30 s).
        await wait_for(all_delivered, within=15.0)
        took = time.monotonic() - back
        entries = await restarted.entries(ids)
    # From JobService's first answer (the probe's) every row goes at once, the killed
    # relay's row too: the next pass sends them all.
    delivered = [e.delivered_at for e in entries.values() if e.delivered_at is not None]
    answered = min(delivered)
    spread = (max(delivered) - answered).total_seconds()
    killed_delivered_at = entries[killed_row].delivered_at
    assert killed_delivered_at is not None
    killed_after = (killed_delivered_at - answered).total_seconds()
    print(
        f"JobService back to last row delivered: {took:.2f} s; rows delivered within"
        f" {spread:.2f} s of the first, the killed relay's {killed_after:.2f} s after it"
    )
    assert spread < 3.0, spread
    jobs = await stack.all_jobs()
    assert sorted(job.target_id for job in jobs) == sorted(f"scrap-{n}" for n in range(20))
    assert {job.id for job in jobs} == {e.job_id for e in entries.values()}
    assert stack.proxy.calls == {row_id: 1 for row_id in ids}  # the hung call never arrived
