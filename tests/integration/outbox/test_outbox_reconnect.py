"""The outbox relay notices JobService's return by its channel, not by its own
backoff (issue 22, point 16), on SQLite and PostgreSQL; and a JobService that
answers "away" on a live connection is not probed in a loop.

The end-to-end figure (san-web's relay, 20 scraps, a 20 s outage) is
tests/acceptance/clients/test_web_outbox_reconnect.py's.
"""

from __future__ import annotations

import asyncio
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
