"""Identical calls in flight share one backend call (issue 13, point 10).

The first caller of a key starts the shared call; a caller of the same key arriving
while it runs joins it instead of starting its own. Every waiter gets the shared call's
answer or its error; the shared call runs within the deadline of the caller that
started it (so a joiner may get that caller's DEADLINE_EXCEEDED a little before its own
deadline: identical calls from JobService have the same deadline, a few moments apart).
A waiter that leaves (its own deadline, or its caller cancelled) leaves alone; the
shared call is cancelled when its last waiter leaves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass
class _Shared(Generic[T]):
    task: asyncio.Task[T]
    waiters: int = field(default=0)


class InFlightCalls:
    """The calls in flight, by key."""

    def __init__(self) -> None:
        self._calls: dict[Hashable, _Shared[Any]] = {}

    def __len__(self) -> int:
        return len(self._calls)

    async def run(self, key: Hashable, start: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        """The answer of the call in flight for ``key`` (joined: True), or of a new one
        made by ``start()`` (False)."""
        shared: _Shared[T] | None = self._calls.get(key)
        joined = shared is not None and not shared.task.cancelled()
        if shared is None or not joined:
            shared = _Shared(asyncio.ensure_future(start()))
            self._calls[key] = shared
            shared.task.add_done_callback(lambda task: self._forget(key, shared, task))
        shared.waiters += 1
        try:
            # shield: this waiter's cancellation must not cancel the shared call.
            return await asyncio.shield(shared.task), joined
        finally:
            shared.waiters -= 1
            if shared.waiters == 0 and not shared.task.done():
                shared.task.cancel()
                self._unmap(key, shared)  # a caller arriving now starts afresh

    def _unmap(self, key: Hashable, shared: _Shared[Any]) -> None:
        if self._calls.get(key) is shared:
            del self._calls[key]

    def _forget(self, key: Hashable, shared: _Shared[Any], task: asyncio.Task[Any]) -> None:
        self._unmap(key, shared)
        # Its waiters read the outcome; mark it read even when none was left to.
        if not task.cancelled():
            task.exception()
