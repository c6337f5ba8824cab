"""Both services run on the event loop their --event-loop setting names, chosen in
one place (san_shared.event_loop)."""

from __future__ import annotations

import asyncio

import uvloop

from san_shared.event_loop import loop_factory, run


async def _loop_type() -> type[asyncio.AbstractEventLoop]:
    return type(asyncio.get_running_loop())


def test_uvloop_by_default_and_asyncio_on_request() -> None:
    assert run(_loop_type()) is uvloop.Loop
    assert run(_loop_type(), "uvloop") is uvloop.Loop
    assert not issubclass(run(_loop_type(), "asyncio"), uvloop.Loop)


def test_the_factory_is_uvloops_or_none_for_asyncios_own() -> None:
    assert loop_factory("uvloop") is uvloop.new_event_loop
    assert loop_factory("asyncio") is None


def test_both_services_choose_their_loop_here() -> None:
    import ai_gateway.cli
    import job_service.cli

    assert job_service.cli.run is run
    assert ai_gateway.cli.run is run
