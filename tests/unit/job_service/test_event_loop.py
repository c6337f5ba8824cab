"""The service runs on the event loop its settings name."""

from __future__ import annotations

import asyncio

import uvloop

from job_service.event_loop import run


async def _loop_type() -> type[asyncio.AbstractEventLoop]:
    return type(asyncio.get_running_loop())


def test_uvloop_by_default_and_asyncio_on_request() -> None:
    assert run(_loop_type()) is uvloop.Loop
    assert run(_loop_type(), "uvloop") is uvloop.Loop
    assert not issubclass(run(_loop_type(), "asyncio"), uvloop.Loop)
