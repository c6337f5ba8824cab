"""JobService's Prometheus metrics (``--metrics-listen``; san_jobs.shared.metrics_http serves
them, san_jobs.shared.grpc_metrics counts the RPCs).

Two kinds of numbers:

- **Events** the worker reports as they happen (`WorkerMetrics`): each attempt's wait
  and run time, its outcome, leases lost. Counters and histograms, labelled by job
  type (an enum) and error code (gRPC code names and the service's own few words),
  with the children of each job type bound once: no label lookup per job.
- **State** read when Prometheus scrapes: jobs by type and status, queue depth and
  the age of the oldest due job per type come from ONE `JobQueries.stats()` call
  (`StatsCollector`, at most one per `STATS_TTL` seconds however many scrapers ask);
  the dispatch pauses from the worker's own view of them (no query), the open
  streams from the stream gate.

A registry per runtime (not prometheus-client's global one): tests run several
services in one process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from san_jobs.job_service.domain.dispatch import PauseReason
from san_jobs.job_service.domain.model import Job, JobStats, JobStatus, JobType

log = logging.getLogger("job_service.metrics")

PREFIX = "san_jobs"

# What one attempt came to (the `outcome` label).
COMPLETED = "completed"
RETRIED = "retried"  # failed, a retry is scheduled
FAILED = "failed"  # failed for good
GIVEN_BACK = "given_back"  # PENDING again, uncharged (its type is paused; shutdown)
CANCELLED = "cancelled"  # stopped by CancelJob
OUTCOMES = (COMPLETED, RETRIED, FAILED, GIVEN_BACK, CANCELLED)
# error_code of an attempt given back at shutdown (no gateway error to name).
SHUTDOWN_CODE = "SHUTDOWN"

# A scrape reuses a stats snapshot this young: two scrapers at once (two Prometheus
# servers, a person with curl) cost one query, not two.
STATS_TTL = 2.0
# How long a scrape waits for the stats query before it answers without the numbers.
STATS_TIMEOUT = 5.0
# Retry due times remembered for the wait histogram (see JobServiceMetrics.started).
RETRIES_REMEMBERED = 100_000

# Seconds waiting for a worker, and an attempt's run: from milliseconds (an idle
# queue, an instant backend) to the longest deadlines (TIL_GENERATION: minutes) and
# backlogs of an hour.
WAIT_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
)  # fmt: skip
RUN_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)  # fmt: skip


class WorkerMetrics(Protocol):
    """What the worker reports about the jobs it runs."""

    def started(self, job: Job) -> None:
        """`job` was claimed (its started_at is the claim's time)."""

    def ran(self, job_type: JobType, seconds: float) -> None:
        """An attempt ended after `seconds` (outcome written, whatever it was)."""

    def outcome(self, job_type: JobType, outcome: str, error_code: str = "") -> None:
        """An attempt came to `outcome` (one of OUTCOMES), with its error code."""

    def retry_scheduled(self, job_id: str, due: datetime) -> None:
        """A retry of `job_id` is due at `due`."""

    def leases_lost(self, count: int = 1) -> None:
        """`count` attempts found their job no longer theirs."""


class NoMetrics:
    """WorkerMetrics that count nothing (no --metrics-listen; unit tests)."""

    def started(self, job: Job) -> None:
        pass

    def ran(self, job_type: JobType, seconds: float) -> None:
        pass

    def outcome(self, job_type: JobType, outcome: str, error_code: str = "") -> None:
        pass

    def retry_scheduled(self, job_id: str, due: datetime) -> None:
        pass

    def leases_lost(self, count: int = 1) -> None:
        pass


class _TypeChildren:
    """One job type's pre-bound children."""

    __slots__ = ("job_type", "outcomes", "run", "wait")

    def __init__(self, metrics: JobServiceMetrics, job_type: JobType) -> None:
        self.job_type = job_type.value
        self.wait = metrics.wait_seconds.labels(job_type.value)
        self.run = metrics.run_seconds.labels(job_type.value)
        # (outcome, error_code) -> child; error codes are few (gRPC code names).
        self.outcomes: dict[tuple[str, str], Any] = {}


class JobServiceMetrics:
    """Every JobService metric, in its own registry; the worker's WorkerMetrics."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._clock = clock or (lambda: datetime.now(UTC))
        self.wait_seconds = Histogram(
            f"{PREFIX}_job_wait_seconds",
            "Time from a job's enqueue (a retry: from its due time) to the start of its "
            "attempt, by job type",
            ["job_type"],
            buckets=WAIT_BUCKETS,
            registry=self.registry,
        )
        self.run_seconds = Histogram(
            f"{PREFIX}_job_run_seconds",
            "Time from the start of an attempt to its end (outcome written), by job type",
            ["job_type"],
            buckets=RUN_BUCKETS,
            registry=self.registry,
        )
        self.outcomes = Counter(
            f"{PREFIX}_job_outcomes_total",
            "Attempts ended on this instance, by job type, outcome (completed, retried, "
            "failed, given_back, cancelled) and error code",
            ["job_type", "outcome", "error_code"],
            registry=self.registry,
        )
        self.leases_lost_total = Counter(
            f"{PREFIX}_leases_lost_total",
            "Attempts whose job was no longer theirs when renewing the lease or writing "
            "the outcome (claimed again after the lease expired, or cancelled)",
            registry=self.registry,
        )
        self.pruned_total = Counter(
            f"{PREFIX}_jobs_pruned_total",
            "Finished jobs deleted past their retention by this instance, by status",
            ["status"],
            registry=self.registry,
        )
        self._types = {job_type: _TypeChildren(self, job_type) for job_type in JobType}
        # job id -> when its retry was due (this instance scheduled it): the claim
        # that starts the retry clears next_attempt_at, so its wait is measured from
        # here. Bounded: a retry another instance claims is never popped.
        self._retries: OrderedDict[str, datetime] = OrderedDict()

    # -- WorkerMetrics ----------------------------------------------------------------

    def started(self, job: Job) -> None:
        started = job.started_at
        if started is None:
            return
        if job.attempt_count <= 1:
            since: datetime | None = job.created_at
            if job.scheduled_at is not None and job.scheduled_at > job.created_at:
                since = job.scheduled_at  # a delayed job waits from its time, not before
        else:
            # A retry scheduled by another instance (or before a restart) has no
            # known due time here: not measured, rather than measured wrong.
            since = self._retries.pop(job.id, None)
        if since is not None:
            seconds = (started - since).total_seconds()
            self._types[job.job_type].wait.observe(max(seconds, 0.0))

    def ran(self, job_type: JobType, seconds: float) -> None:
        self._types[job_type].run.observe(seconds)

    def outcome(self, job_type: JobType, outcome: str, error_code: str = "") -> None:
        children = self._types[job_type]
        child = children.outcomes.get((outcome, error_code))
        if child is None:
            child = self.outcomes.labels(children.job_type, outcome, error_code)
            children.outcomes[(outcome, error_code)] = child
        child.inc()

    def retry_scheduled(self, job_id: str, due: datetime) -> None:
        self._retries[job_id] = due
        if len(self._retries) > RETRIES_REMEMBERED:
            self._retries.popitem(last=False)

    def leases_lost(self, count: int = 1) -> None:
        self.leases_lost_total.inc(count)

    # -- others' events ----------------------------------------------------------------

    def pruned(self, status: str, count: int) -> None:
        """The pruner deleted `count` finished jobs of `status` (a JobStatus word)."""
        if count > 0:
            self.pruned_total.labels(status).inc(count)

    # -- state read at scrape time -----------------------------------------------------

    def watch_stats(
        self,
        stats: Callable[[], Awaitable[JobStats]],
        loop: asyncio.AbstractEventLoop,
        ttl: float = STATS_TTL,
        timeout: float = STATS_TIMEOUT,
    ) -> StatsCollector:
        """Expose the job counts from `stats` (JobQueries.stats), run on `loop`."""
        collector = StatsCollector(stats, loop, ttl=ttl, timeout=timeout, clock=self._clock)
        self.registry.register(collector)
        return collector

    def watch_pauses(self, paused: Callable[[], Mapping[JobType, PauseReason]]) -> None:
        """Expose the dispatch pauses `paused` returns (the worker's view; called from
        the metrics server's thread)."""
        self.registry.register(PauseCollector(paused))

    def watch_streams(self, open_streams: Callable[[], int]) -> None:
        """Expose the StreamJobUpdates streams open now."""
        gauge = Gauge(
            f"{PREFIX}_update_streams_open",
            "StreamJobUpdates streams open on this instance (live feeds included)",
            registry=self.registry,
        )
        gauge.set_function(lambda: float(open_streams()))

    def watch_change_feed(self, position: Callable[[], int], streams: Callable[[], int]) -> None:
        """Expose the change feed as this instance sees it (change_feed.py)."""
        seen = Gauge(
            f"{PREFIX}_change_feed_position",
            "the change feed's last position this instance has seen (it grows with every "
            "job change; flat while jobs finish: the feed task is stuck)",
            registry=self.registry,
        )
        seen.set_function(lambda: float(position()))
        open_now = Gauge(
            f"{PREFIX}_change_streams_open",
            "StreamJobChanges streams open on this instance",
            registry=self.registry,
        )
        open_now.set_function(lambda: float(streams()))


class PauseCollector(Collector):
    """``san_jobs_dispatch_paused{job_type,reason}``: 1 while the type is not claimed
    for that reason, else 0 (every type and reason, so a pause ending shows as 0)."""

    def __init__(self, paused: Callable[[], Mapping[JobType, PauseReason]]) -> None:
        self._paused = paused

    def describe(self) -> Iterable[Metric]:
        return [self._family()]

    def collect(self) -> Iterable[Metric]:
        family = self._family()
        paused = self._paused()
        for job_type in JobType:
            for reason in PauseReason:
                value = 1.0 if paused.get(job_type) is reason else 0.0
                family.add_metric([job_type.value, reason.value], value)
        return [family]

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            f"{PREFIX}_dispatch_paused",
            "1 while jobs of the type are not claimed (circuit open, or rate limited by "
            "the provider), as this instance sees the shared pauses",
            labels=["job_type", "reason"],
        )


class StatsCollector(Collector):
    """Job counts, queue depth and the oldest due job's age, from one stats() call.

    prometheus-client calls collect() in its HTTP server's thread, while the store is
    async and belongs to the event loop. So collect() hands the query to the loop
    (run_coroutine_threadsafe) and waits for it there, in the server's thread, with a
    timeout; the answer is kept STATS_TTL seconds, and scrapes arriving while a query
    runs wait for that same query. So however many scrape, the database sees at most
    one stats query per STATS_TTL, and none at all while nobody scrapes (a background
    refresh would query forever). A failed or slow query gives ``san_jobs_stats_up 0``
    and no job gauges, never a failed scrape.
    """

    def __init__(
        self,
        stats: Callable[[], Awaitable[JobStats]],
        loop: asyncio.AbstractEventLoop,
        *,
        ttl: float,
        timeout: float,
        clock: Callable[[], datetime],
    ) -> None:
        self._stats = stats
        self._loop = loop
        self._ttl = ttl
        self._timeout = timeout
        self._clock = clock
        self._lock = threading.Lock()
        self._snapshot: JobStats | None = None
        self._taken_at = float("-inf")  # time.monotonic() of the last answer (or failure)
        self._pending: concurrent.futures.Future[JobStats] | None = None
        self.queries = 0  # stats() calls made, for tests and curious operators
        # Made by the runtime's start(), on the loop's thread: see _latest.
        self._loop_thread = threading.get_ident()

    def describe(self) -> Iterable[Metric]:
        return list(self._families())

    def collect(self) -> Iterable[Metric]:
        snapshot = self._latest()
        up, jobs, depth, oldest = self._families()
        up.add_metric([], 0.0 if snapshot is None else 1.0)
        if snapshot is None:
            return [up]
        counts = {(c.job_type, c.status): c.count for c in snapshot.counts}
        now = self._clock()
        for job_type in JobType:
            for status in JobStatus:
                jobs.add_metric([job_type.value, status.value], counts.get((job_type, status), 0))
            depth.add_metric([job_type.value], counts.get((job_type, JobStatus.PENDING), 0))
            due = snapshot.oldest_due_by_type.get(job_type)
            age = 0.0 if due is None else max((now - due).total_seconds(), 0.0)
            oldest.add_metric([job_type.value], age)
        return [up, jobs, depth, oldest]

    @staticmethod
    def _families() -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            f"{PREFIX}_stats_up",
            "1 when the last job count query answered, 0 when it failed or was slow "
            "(the job gauges are then left out)",
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_jobs",
            "Jobs in the database by type and status (all instances)",
            labels=["job_type", "status"],
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_queue_depth",
            "PENDING jobs by type, all instances, ready or not: due now, delayed "
            "(schedule_time, a retry's backoff) and waiting for dependencies alike, so "
            "not the ready backlog (san_jobs_oldest_due_job_age_seconds says whether "
            "due work waits)",
            labels=["job_type"],
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_oldest_due_job_age_seconds",
            "Seconds since the PENDING job due longest ago became due, by type (0 when "
            "none is due): for autoscaling workers",
            labels=["job_type"],
        )

    def _latest(self) -> JobStats | None:
        """The snapshot, refreshed first when older than the TTL; None when it could
        not be read."""
        with self._lock:
            if self._pending is not None and self._pending.done():
                self._keep(self._pending)
            if time.monotonic() - self._taken_at < self._ttl:
                return self._snapshot
            pending = self._pending
            if pending is None:
                try:
                    pending = asyncio.run_coroutine_threadsafe(self._read(), self._loop)
                except RuntimeError:  # the loop is closed: the service is stopping
                    return None
                self._pending = pending
        if threading.get_ident() == self._loop_thread:
            # Called on the loop itself (a test calling generate_latest in a
            # coroutine): waiting would block the loop the query needs. This scrape
            # gets what is known; the query runs and serves the next one.
            return self._snapshot
        try:
            pending.result(self._timeout)
        except concurrent.futures.TimeoutError:
            log.warning("metrics: the job count query took over %.0fs; stats_up 0", self._timeout)
            return None  # the query goes on; the next scrape waits for it
        except Exception:  # any: a scrape must answer (_keep logs it)
            pass
        with self._lock:
            if self._pending is pending:
                self._keep(pending)
            return self._snapshot

    def _keep(self, done: concurrent.futures.Future[JobStats]) -> None:
        """Take the answer of the query `done` as the snapshot (None when it failed:
        kept as long, so a failing database is not asked at every scrape)."""
        self._pending = None
        self._taken_at = time.monotonic()
        try:
            self._snapshot = done.result()
        except Exception as error:
            log.warning("metrics: the job count query failed: %s", error)
            self._snapshot = None

    async def _read(self) -> JobStats:
        self.queries += 1
        return await self._stats()
