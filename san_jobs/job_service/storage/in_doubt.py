"""Enqueues whose INSERT may or may not have committed: found out before answering.

When the connection under a batch INSERT breaks after the statement was sent (the
database restarted, a socket reset), the rows may have been committed with the
answer lost, or not at all. Answering UNAVAILABLE could then be a lie: the caller,
told its job failed, sends it again, and one of the two jobs is a ghost. Answering
OK could be a lie the other way: a job promised and never stored.

So the callers of such a batch wait while the store finds out, once the database
answers again: first it makes sure the server process that ran the INSERT is gone
(ending it if it still runs, so a slow commit cannot land after the check), then it
reads which of the batch's ids exist. A stored job is returned as if the INSERT had
answered; a missing one gets StorageUnavailableError, which is then the truth. The
wait lasts as long as the database stays away; each caller's own deadline bounds it
(the caller then hears DEADLINE_EXCEEDED, "outcome unknown", never "failed").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from sqlalchemy.ext.asyncio import AsyncEngine

from san_jobs.job_service.domain.errors import StorageUnavailableError
from san_jobs.job_service.domain.model import Job
from san_jobs.job_service.storage.direct import Backend, end_backend

log = logging.getLogger("job_service.storage.in_doubt")

# Read the jobs with these ids that exist (any state).
ReadJobs = Callable[[Sequence[str]], Awaitable[list[Job]]]

FIRST_RETRY_DELAY = 0.05
MAX_RETRY_DELAY = 1.0


class InsertInDoubt:
    """One batch INSERT whose answer was lost. `stored(job_id)` waits until it is
    known whether that row was committed (then its Job) or not (None). The batch is
    checked once for all its callers, and only while one of them still waits."""

    def __init__(
        self, engine: AsyncEngine, backend: Backend | None, ids: Sequence[str], read: ReadJobs
    ) -> None:
        self._engine = engine
        self._backend = backend
        self._ids = list(ids)
        self._read = read
        self._task: asyncio.Task[dict[str, Job]] | None = None
        self._waiters = 0

    async def stored(self, job_id: str) -> Job | None:
        task = self._task
        if task is None or task.cancelled():
            task = self._task = asyncio.ensure_future(self._settle())
        self._waiters += 1
        try:
            found = await asyncio.shield(task)
        finally:
            self._waiters -= 1
            if self._waiters == 0 and not task.done():
                task.cancel()  # nobody wants the answer any more
        return found.get(job_id)

    async def _settle(self) -> dict[str, Job]:
        delay = FIRST_RETRY_DELAY
        while True:
            try:
                await end_backend(self._engine, self._backend)
                found = {job.id: job for job in await self._read(self._ids)}
            except StorageUnavailableError as error:
                if delay == FIRST_RETRY_DELAY:
                    log.warning(
                        "enqueue of %d job(s) in doubt, waiting for the database: %s",
                        len(self._ids),
                        error,
                    )
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_RETRY_DELAY)
                continue
            log.warning(
                "enqueue of %d job(s) was in doubt: %d stored, %d not",
                len(self._ids),
                len(found),
                len(self._ids) - len(found),
            )
            return found


class EnqueueInDoubtError(StorageUnavailableError):
    """One caller's row of an InsertInDoubt (raised out of the batch, to be settled
    by that caller with `settle()`)."""

    def __init__(self, job_id: str, insert: InsertInDoubt, cause: StorageUnavailableError) -> None:
        super().__init__(str(cause))
        self.job_id = job_id
        self._insert = insert

    async def settle(self) -> Job:
        """The stored job; StorageUnavailableError if the row was not committed."""
        job = await self._insert.stored(self.job_id)
        if job is None:
            raise StorageUnavailableError(f"{self} (the job was not stored)") from self
        return job
