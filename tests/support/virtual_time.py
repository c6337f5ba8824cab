"""An event loop whose clock jumps, for tests of timing that must not wait.

When every task waits for a time (asyncio.sleep, a timeout, call_later) and nothing
else is ready, the loop moves its clock straight to the earliest of those times
instead of sleeping. Timing plays out exactly as on a real loop, in order, but a
minute of backoff costs microseconds, and every run is the same. `VirtualTimeLoop.now`
is the matching wall clock, to give the code under test (a store's or a worker's
`clock=`).

Only for code that does no real I/O: a wait for a socket or a thread with no timer
pending is a deadlock here, and raises instead of hanging.
"""

from __future__ import annotations

import asyncio
import functools
import selectors
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec, TypeVar

START = datetime(2025, 3, 1, 9, 0, 0, tzinfo=UTC)

P = ParamSpec("P")
T = TypeVar("T")


class _JumpingSelector:
    """The loop's selector, asked only for what is ready now; its wait is a jump."""

    def __init__(self, selector: selectors.BaseSelector, loop: VirtualTimeLoop) -> None:
        self._selector = selector
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._selector.select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            raise RuntimeError("every task waits and no time is scheduled: a deadlock")
        self._loop.advance(timeout)
        return []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._selector, name)


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        super().__init__()
        self._virtual_time = 0.0
        real: selectors.BaseSelector = self._selector  # type: ignore[has-type]
        self._selector = _JumpingSelector(real, self)

    def time(self) -> float:
        return self._virtual_time

    def advance(self, seconds: float) -> None:
        self._virtual_time += seconds

    def now(self) -> datetime:
        """The wall clock of this loop: START when it began, moving with its time."""
        return START + timedelta(seconds=self._virtual_time)


def running_loop() -> VirtualTimeLoop:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, VirtualTimeLoop), "not on a virtual time loop (use on_virtual_time)"
    return loop


def on_virtual_time(test: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
    """Run an async test on a VirtualTimeLoop of its own (a plain test to pytest)."""

    @functools.wraps(test)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
            return runner.run(test(*args, **kwargs))

    return run
