"""Which event loop runs the service."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T], loop: Literal["uvloop", "asyncio"] = "uvloop") -> T:
    """Run `main` to completion on a new event loop: uvloop's (libuv; the service
    spends a fifth fewer instructions per Enqueue on it, measured with callgrind),
    or asyncio's own. Where uvloop is not installed, asyncio's."""
    factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    if loop == "uvloop":
        try:
            import uvloop
        except ImportError:  # pragma: no cover - a platform uvloop does not support
            factory = None
        else:
            factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
