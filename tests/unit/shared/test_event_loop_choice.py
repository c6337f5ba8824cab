"""Both services run on the event loop their --event-loop setting names, chosen in
one place (san_jobs.shared.event_loop)."""

from __future__ import annotations

import asyncio

import uvloop

from san_jobs.shared.event_loop import loop_factory, run


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
    from san_jobs.ai_gateway import cli as gateway_cli
    from san_jobs.job_service import cli as job_service_cli

    assert job_service_cli.run is run
    assert gateway_cli.run is run
