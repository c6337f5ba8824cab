"""Readiness follows the database: job-service's health reports the JobService name
NOT_SERVING while the database does not answer, and SERVING again, by itself, once
it does.

Which health names change, and why:

- ``san.jobs.v1.JobService`` is readiness: SERVING means "send me calls". Without
  its database the service can answer nothing useful (every Enqueue would get
  UNAVAILABLE), so a load balancer or orchestrator should route calls elsewhere.
- ``""`` (the server as a whole) is liveness: it stays SERVING while the process
  runs, database or not (until shutdown). Restarting a process because its database
  is away does not bring the database back; it only drops the jobs in flight and
  adds a thundering herd of reconnects when the database returns. The process
  recovers by itself (the worker retries, this monitor flips readiness back).

How: `SELECT 1` on a connection of its own (JobStore.ping) every `interval` seconds,
each with a timeout of at most `interval` (and MAX_TIMEOUT), so a database that
hangs rather than refuses is noticed too. One log line when the database goes away
and one when it is back, never one per check.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from san_jobs.job_service.domain.errors import StorageError, StorageUnavailableError
from san_jobs.shared.background import BackgroundLoop

log = logging.getLogger("job_service.db_health")

MAX_TIMEOUT = 5.0
"""Seconds a check may wait for its answer, at most (and never more than the interval)."""


class Pingable(Protocol):
    """The part of JobStore the monitor uses."""

    async def ping(self) -> None: ...


class DatabaseHealth:
    """Checks the database every `interval` seconds and calls `set_ready(False)` when
    it stops answering, `set_ready(True)` when it answers again (only on a change).
    It starts out ready: the service starts only once its database has been
    migrated. `interval` 0 turns the checks off."""

    def __init__(
        self,
        store: Pingable,
        set_ready: Callable[[bool], Awaitable[None]],
        *,
        interval: float,
        timeout: float | None = None,
    ) -> None:
        self._store = store
        self._set_ready = set_ready
        self.interval = interval
        self.timeout = timeout if timeout is not None else min(interval, MAX_TIMEOUT)
        self.ready = True
        self._down_since = 0.0
        self._loop = BackgroundLoop("db-health", self.run)

    async def check(self) -> bool:
        """Ask the database once; report a change of state. Returns whether it answered."""
        try:
            async with asyncio.timeout(self.timeout):
                await self._store.ping()
        except TimeoutError:
            silent = StorageUnavailableError(f"no answer within {self.timeout:g} s")
            return await self._down(silent)
        except Exception as error:
            return await self._down(error)
        if not self.ready:
            self.ready = True
            log.info(
                "database answers again after %.1f s: health reports SERVING",
                asyncio.get_running_loop().time() - self._down_since,
            )
            await self._set_ready(True)
        return True

    async def _down(self, error: Exception) -> bool:
        if self.ready:
            self.ready = False
            self._down_since = asyncio.get_running_loop().time()
            # A StorageError's text is the driver's short reason; anything else is a
            # bug in the check itself and gets its traceback.
            log.warning(
                "database unreachable (%s): health reports NOT_SERVING until it answers",
                error,
                exc_info=not isinstance(error, StorageError),
            )
            await self._set_ready(False)
        return False

    async def run(self) -> None:
        """Check every `interval` seconds until cancelled."""
        while True:
            await asyncio.sleep(self.interval)
            await self.check()

    def start(self) -> None:
        """Run the checks in the background (nothing with `interval` 0)."""
        if self.interval > 0:
            self._loop.start()

    async def stop(self) -> None:
        """Stop checking (before shutdown sets every name NOT_SERVING for good)."""
        await self._loop.stop()
