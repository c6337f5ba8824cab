"""In-process fan-out of job changes to streams.

Every write that changes a job is published here (by this instance directly, or
after re-reading rows another instance announced through PostgreSQL NOTIFY).
Each subscriber owns a bounded buffer that keeps only the latest state of each
job, so a slow or stuck client costs memory proportional to the jobs it watches,
never blocks the publisher, and never sees a job's states out of order.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence

from san_jobs.job_service.domain.freshness import supersedes
from san_jobs.job_service.domain.model import Job, JobStatus, JobType

log = logging.getLogger("job_service.updates")

# A feed subscriber that falls this far behind loses its oldest buffered jobs
# (their newest state will be re-sent if they change again).
FEED_BUFFER_LIMIT = 10_000


class Subscription:
    """One stream's view of the hub: `get()` waits for the next batch of changed jobs."""

    __slots__ = ("_buffer", "_closed", "_event", "_hub", "job_ids", "job_types", "statuses")

    def __init__(
        self,
        hub: UpdateHub,
        job_ids: frozenset[str],
        job_types: frozenset[JobType],
        statuses: frozenset[JobStatus],
    ) -> None:
        self._hub = hub
        self.job_ids = job_ids
        self.job_types = job_types
        self.statuses = statuses
        self._buffer: OrderedDict[str, Job] = OrderedDict()
        self._event = asyncio.Event()
        self._closed = False

    @property
    def is_feed(self) -> bool:
        return not self.job_ids

    def matches(self, job: Job) -> bool:
        if self.job_ids:
            return job.id in self.job_ids
        if self.job_types and job.job_type not in self.job_types:
            return False
        return not self.statuses or job.status in self.statuses

    def offer(self, job: Job) -> None:
        """Called by the hub; never blocks."""
        buffered = self._buffer.get(job.id)
        if buffered is not None and not supersedes(job, buffered):
            return  # a state seen already, or an older one arriving late
        self._buffer[job.id] = job
        self._buffer.move_to_end(job.id)
        if self.is_feed and len(self._buffer) > FEED_BUFFER_LIMIT:
            self._buffer.popitem(last=False)
        self._event.set()

    async def get(self) -> list[Job]:
        """The jobs changed since the last call (latest state each), waiting if none."""
        while not self._buffer and not self._closed:
            self._event.clear()
            await self._event.wait()
        jobs = list(self._buffer.values())
        self._buffer.clear()
        return jobs

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._event.set()
            self._hub.unsubscribe(self)

    @property
    def closed(self) -> bool:
        return self._closed


class UpdateHub:
    """Routes each published job to the subscriptions that watch it."""

    def __init__(self) -> None:
        self._by_job: dict[str, set[Subscription]] = {}
        self._feeds: set[Subscription] = set()
        # Told of every publish, after the streams (the change feed's wake-up).
        self._listeners: list[Callable[[Sequence[Job]], None]] = []

    def add_listener(self, listener: Callable[[Sequence[Job]], None]) -> None:
        self._listeners.append(listener)

    def subscribe(
        self,
        job_ids: Iterable[str] = (),
        job_types: Iterable[JobType] = (),
        statuses: Iterable[JobStatus] = (),
    ) -> Subscription:
        sub = Subscription(self, frozenset(job_ids), frozenset(job_types), frozenset(statuses))
        if sub.is_feed:
            self._feeds.add(sub)
        else:
            for job_id in sub.job_ids:
                self._by_job.setdefault(job_id, set()).add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        if sub.is_feed:
            self._feeds.discard(sub)
            return
        for job_id in sub.job_ids:
            subs = self._by_job.get(job_id)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._by_job[job_id]

    def publish(self, jobs: Iterable[Job]) -> None:
        if self._listeners:
            jobs = list(jobs)
            for listener in self._listeners:
                listener(jobs)
        for job in jobs:
            for sub in self._by_job.get(job.id, ()):
                sub.offer(job)
            for sub in self._feeds:
                if sub.matches(job):
                    sub.offer(job)

    def watched_ids(self, job_ids: Iterable[str]) -> list[str]:
        """Those of `job_ids` that some stream cares about (all of them if a feed is open)."""
        if self._feeds:
            return list(job_ids)
        return [job_id for job_id in job_ids if job_id in self._by_job]

    def all_watched_ids(self) -> list[str]:
        return list(self._by_job)

    @property
    def subscription_count(self) -> int:
        return len(self._feeds) + len({id(s) for subs in self._by_job.values() for s in subs})
