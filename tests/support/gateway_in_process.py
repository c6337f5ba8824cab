"""The real AiGateway server in the test's own process, on a free loopback port, for
tests that must know exactly when the gateway is working on a call and when that
call is cancelled (a process can only tell them afterwards, in its call log).

    backend = HangingBackend()
    async with gateway_in_process(tmp_path, backend, rate_limit=0.5) as gateway:
        ...  # job-service (a process or in-process) calls gateway.address
        await wait_for(backend.arrived, "the call")  # the gateway works on it

Everything but the backend is the real gateway: its StreamCalls transport, limits,
deadlines, fault injection and call records (`call_records(gateway)`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import TracerProvider

from san_jobs.ai_gateway.backends.base import Backend
from san_jobs.ai_gateway.backends.instant import InstantBackend
from san_jobs.ai_gateway.models import AnalyzeInput, AnalyzeResult
from san_jobs.ai_gateway.server import GatewayServer
from san_jobs.ai_gateway.settings import GatewaySettings


class HangingBackend(InstantBackend):
    """Never answers a card analysis: `arrived` is set when one reaches the backend
    (the gateway is working on it), `cancelled` when the gateway cancels that work.
    The other kinds answer at once, as the instant backend does."""

    name = "hanging"

    def __init__(self) -> None:
        self.arrived = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.calls = 0

    async def analyze(self, request: AnalyzeInput, time_left: float | None) -> AnalyzeResult:
        self.calls += 1
        self.arrived.set()
        try:
            await asyncio.get_running_loop().create_future()  # never set
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        raise AssertionError("unreachable: the future is never set")


@dataclass
class InProcessGateway:
    server: GatewayServer
    call_log: Path
    address: str = field(init=False)

    def __post_init__(self) -> None:
        self.address = f"127.0.0.1:{self.server.port}"


@asynccontextmanager
async def gateway_in_process(
    log_dir: Path,
    backend: Backend | None = None,
    tracer_provider: TracerProvider | None = None,
    **settings: Any,
) -> AsyncIterator[InProcessGateway]:
    """A started GatewayServer with `settings` (GatewaySettings fields) and a call log
    in `log_dir`; the local backend unless `backend` is given; traced with
    `tracer_provider` if given. Stopped at the end."""
    # The file is made by the gateway's CallLog (with its folder).
    call_log = log_dir / f"gateway-calls-{time.monotonic_ns()}.jsonl"
    server = GatewayServer(
        GatewaySettings(listen="127.0.0.1:0", call_log=call_log, **settings),
        backend,
        tracer_provider,
    )
    await server.start()
    try:
        yield InProcessGateway(server, call_log)
    finally:
        await server.stop(0)


def call_records(gateway: InProcessGateway) -> list[dict[str, Any]]:
    """The gateway's call records so far (one per finished call), oldest first."""
    if not gateway.call_log.exists():
        return []
    return [json.loads(line) for line in gateway.call_log.read_text().splitlines()]


async def wait_for(event: asyncio.Event, what: str, within: float = 20.0) -> None:
    """Until `event` is set; AssertionError naming `what` after `within` seconds."""
    try:
        await asyncio.wait_for(event.wait(), within)
    except TimeoutError:
        raise AssertionError(f"not within {within}s: {what}") from None


async def until(condition: Callable[[], object], what: str, within: float = 20.0) -> None:
    """Until `condition()` is true (checked every 20 ms); AssertionError naming `what`
    after `within` seconds. For state only a poll can see (a file, a process)."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within}s: {what}")
        await asyncio.sleep(0.02)
