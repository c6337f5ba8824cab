"""Waiting for a condition that no event announces.

Tests wait for events where one exists (an asyncio.Event, a stream message, a
process's "listening" line). Some facts have none, e.g. "the worker has let go of
the job": those are polled, with a deadline that bounds a hung test and says what
never happened. A deadline here is never a timing assertion.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def wait_until(condition: Callable[[], bool], what: str, within: float = 10.0) -> None:
    """Return once `condition()` holds; fail naming `what` after `within` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not condition():
        if loop.time() >= deadline:
            raise AssertionError(f"still waiting after {within:g}s for {what}")
        await asyncio.sleep(0.01)
