"""One background loop of a service: a named asyncio task that runs a body until it is
stopped, in one place for every loop (the pruner, the count folder, the database's
health checks, the change feed, the schedule firer, the worker's lease renewal and
its producer, the PostgreSQL change listener, san-web's day planner).

A body that raises is a bug the loop must outlive: the error is logged with its
traceback, naming the loop, and the body runs again after `restart_after` seconds.
Before, a loop whose body raised anything its own `except` did not name died in
silence (asyncio's "Task exception was never retrieved", at best at garbage
collection): the schedule firer then fired nothing more until a restart, and no
line said why."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger("san_shared.background")

RESTART_AFTER_SECONDS = 1.0


class BackgroundLoop:
    """`body` (a coroutine function that loops) run as the task `name` between
    `start()` and `stop()`; restarted, after a logged crash, `restart_after` later."""

    def __init__(
        self,
        name: str,
        body: Callable[[], Awaitable[None]],
        *,
        restart_after: float = RESTART_AFTER_SECONDS,
    ) -> None:
        self.name = name
        self._body = body
        self._restart_after = restart_after
        self._task: asyncio.Task[None] | None = None
        # Set by stop(cancel=False): the body is ending by itself; no restart after it.
        self._stopping = asyncio.Event()
        self.crashes = 0

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start the task (nothing if it runs already)."""
        if self._task is None:
            self._stopping.clear()
            self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self, *, cancel: bool = True) -> None:
        """Cancel the task and wait for it to end (nothing if it does not run).

        With `cancel=False`, the owner has asked its body to end by itself (its own
        flag): wait for the pass under way to return, uncancelled. The worker's
        producer needs this: a claim it is making must be handed over, not cut
        between the database's commit and the pool (the jobs would sit claimed
        until their lease expired). A body waiting out a crash's restart pause
        does not run again."""
        task, self._task = self._task, None
        if task is None:
            return
        if cancel:
            task.cancel()
        else:
            self._stopping.set()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _run(self) -> None:
        while True:
            try:
                await self._body()
            except asyncio.CancelledError:
                raise
            except Exception:
                self.crashes += 1
                log.exception(
                    "background loop %s failed (%d times); restarted in %g s",
                    self.name, self.crashes, self._restart_after,
                )  # fmt: skip
            else:
                return  # the body ended by itself: its work is done
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._restart_after):
                    await self._stopping.wait()
            if self._stopping.is_set():
                return
