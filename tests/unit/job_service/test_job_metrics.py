"""JobService's metrics (san_jobs.job_service.metrics) without a database: the stats collector's
one-query-per-scrape rule, its failure modes, the wait histogram of first attempts and
retries, and the pause gauge. Scrapes run in a thread, as prometheus-client's HTTP
server runs them."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from san_jobs.job_service.dispatch_breaker import BreakerConfig, DispatchBreaker
from san_jobs.job_service.domain.dispatch import DispatchPause, PauseReason
from san_jobs.job_service.domain.model import Job, JobCount, JobStats, JobStatus, JobType
from san_jobs.job_service.metrics import COMPLETED, FAILED, JobServiceMetrics
from san_jobs.job_service.storage.memory import MemoryJobStore
from tests.support.waiting import wait_until

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)

STATS = JobStats(
    counts=(
        JobCount(JobType.CARD_ANALYSIS, JobStatus.PENDING, 7),
        JobCount(JobType.CARD_ANALYSIS, JobStatus.COMPLETED, 40),
        JobCount(JobType.EMBEDDING, JobStatus.FAILED, 2),
    ),
    oldest_pending_created_at=NOW - timedelta(minutes=5),
    oldest_due_by_type={JobType.CARD_ANALYSIS: NOW - timedelta(seconds=90)},
)


class CountingStats:
    """A stats() that counts its calls, and can be held, or made to fail."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = asyncio.Event()
        self.release.set()
        self.error: Exception | None = None

    async def __call__(self) -> JobStats:
        self.calls += 1
        await self.release.wait()
        if self.error is not None:
            raise self.error
        return STATS


def samples(metrics: JobServiceMetrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    text = generate_latest(metrics.registry).decode()
    found: dict[tuple[tuple[str, str], ...], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


async def scrape(metrics: JobServiceMetrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return await asyncio.to_thread(samples, metrics, name)


def watched(ttl: float = 3600.0, timeout: float = 10.0) -> tuple[JobServiceMetrics, CountingStats]:
    metrics = JobServiceMetrics(clock=lambda: NOW)
    stats = CountingStats()
    metrics.watch_stats(stats, asyncio.get_running_loop(), ttl=ttl, timeout=timeout)
    return metrics, stats


async def test_scrapes_in_a_row_cost_one_stats_call() -> None:
    metrics, stats = watched()
    for _ in range(3):
        jobs = await scrape(metrics, "san_jobs_jobs")
        assert jobs[(("job_type", "CARD_ANALYSIS"), ("status", "COMPLETED"))] == 40
    assert stats.calls == 1
    # Every type and status is shown, zero where there is none.
    assert len(jobs) == len(JobType) * len(JobStatus)
    assert jobs[(("job_type", "TIL_GENERATION"), ("status", "PENDING"))] == 0
    depth = await scrape(metrics, "san_jobs_queue_depth")
    assert depth[(("job_type", "CARD_ANALYSIS"),)] == 7
    assert depth[(("job_type", "EMBEDDING"),)] == 0
    age = await scrape(metrics, "san_jobs_oldest_due_job_age_seconds")
    assert age[(("job_type", "CARD_ANALYSIS"),)] == 90
    assert age[(("job_type", "EMBEDDING"),)] == 0  # none due
    assert (await scrape(metrics, "san_jobs_stats_up"))[()] == 1
    assert stats.calls == 1


async def test_scrapes_at_once_share_one_stats_call() -> None:
    metrics, stats = watched()
    stats.release.clear()
    scrapes = [asyncio.create_task(scrape(metrics, "san_jobs_jobs")) for _ in range(4)]
    await wait_until(lambda: stats.calls == 1, "the first scrape's query")
    await asyncio.sleep(0.05)  # let the other scrapes reach the collector meanwhile
    stats.release.set()
    for answer in await asyncio.gather(*scrapes):
        assert answer[(("job_type", "CARD_ANALYSIS"), ("status", "PENDING"))] == 7
    assert stats.calls == 1


async def test_an_old_snapshot_is_read_again() -> None:
    metrics, stats = watched(ttl=0.0)
    await scrape(metrics, "san_jobs_jobs")
    await scrape(metrics, "san_jobs_jobs")
    assert stats.calls == 2


async def test_a_failed_query_gives_stats_up_0_and_no_job_gauges() -> None:
    metrics, stats = watched()
    stats.error = RuntimeError("database unreachable")
    assert (await scrape(metrics, "san_jobs_stats_up"))[()] == 0
    assert await scrape(metrics, "san_jobs_jobs") == {}
    # The failure is kept as long as an answer: a failing database is not asked per scrape.
    assert stats.calls == 1
    # The rest of the page is still there.
    assert await scrape(metrics, "san_jobs_leases_lost_total") == {(): 0}


async def test_a_slow_query_gives_stats_up_0_and_serves_the_next_scrape() -> None:
    metrics, stats = watched(timeout=0.1)
    stats.release.clear()
    assert (await scrape(metrics, "san_jobs_stats_up"))[()] == 0
    stats.release.set()
    await wait_until(lambda: stats.calls == 1, "the query")
    jobs = await scrape(metrics, "san_jobs_jobs")
    assert jobs[(("job_type", "CARD_ANALYSIS"), ("status", "COMPLETED"))] == 40
    assert stats.calls == 1  # the slow query's answer, not a second query


async def test_a_scrape_on_the_event_loop_does_not_block_it() -> None:
    metrics, stats = watched()
    # On the loop itself: nothing known yet, the query starts and serves the next scrape.
    assert samples(metrics, "san_jobs_stats_up")[()] == 0
    await wait_until(lambda: stats.calls == 1, "the query")
    assert (await scrape(metrics, "san_jobs_stats_up"))[()] == 1
    assert stats.calls == 1


def job(attempt: int, created: datetime, started: datetime) -> Job:
    base = Job(
        id="j1",
        job_type=JobType.EMBEDDING,
        status=JobStatus.PROCESSING,
        target_id="t",
        request_params={},
        requested_by="",
        request_id=None,
        result=None,
        error_message=None,
        error_code=None,
        error_reason=None,
        attempt_count=attempt,
        max_attempts=3,
        created_at=created,
        updated_at=started,
        started_at=started,
        completed_at=None,
        failed_at=None,
        cancelled_at=None,
        cancel_reason=None,
        next_attempt_at=None,
        lease_expires_at=None,
        claim_token="tok",
    )
    return base


def wait_sum(metrics: JobServiceMetrics) -> tuple[float, float]:
    labels = {"job_type": "EMBEDDING"}
    count = metrics.registry.get_sample_value("san_jobs_job_wait_seconds_count", labels)
    total = metrics.registry.get_sample_value("san_jobs_job_wait_seconds_sum", labels)
    return count or 0.0, total or 0.0


def test_wait_is_from_enqueue_and_for_a_retry_from_its_due_time() -> None:
    metrics = JobServiceMetrics()
    metrics.started(job(1, NOW, NOW + timedelta(seconds=2)))
    assert wait_sum(metrics) == (1, 2)
    # The retry this instance scheduled: from its due time, not from the enqueue.
    metrics.retry_scheduled("j1", NOW + timedelta(seconds=30))
    metrics.started(job(2, NOW, NOW + timedelta(seconds=30.5)))
    assert wait_sum(metrics) == (2, 2.5)
    # A retry scheduled elsewhere: its due time is unknown here, so it is not measured.
    metrics.started(job(3, NOW, NOW + timedelta(seconds=90)))
    assert wait_sum(metrics) == (2, 2.5)


def test_outcomes_are_counted_by_type_outcome_and_code() -> None:
    metrics = JobServiceMetrics()
    metrics.outcome(JobType.EMBEDDING, COMPLETED)
    metrics.outcome(JobType.EMBEDDING, COMPLETED)
    metrics.outcome(JobType.EMBEDDING, FAILED, "INVALID_ARGUMENT")
    value = metrics.registry.get_sample_value
    name = "san_jobs_job_outcomes_total"
    labels = {"job_type": "EMBEDDING", "outcome": "completed", "error_code": ""}
    assert value(name, labels) == 2
    labels = {"job_type": "EMBEDDING", "outcome": "failed", "error_code": "INVALID_ARGUMENT"}
    assert value(name, labels) == 1
    metrics.pruned(JobStatus.COMPLETED, 1500)
    assert value("san_jobs_jobs_pruned_total", {"status": "COMPLETED"}) == 1500


@pytest.mark.parametrize("reason", list(PauseReason))
def test_the_pause_gauge_shows_every_type_and_reason(reason: PauseReason) -> None:
    metrics = JobServiceMetrics()
    metrics.watch_pauses(lambda: {JobType.TIL_GENERATION: reason})
    paused = samples(metrics, "san_jobs_dispatch_paused")
    assert len(paused) == len(JobType) * len(PauseReason)
    on = {labels for labels, value in paused.items() if value == 1}
    assert on == {(("job_type", "TIL_GENERATION"), ("reason", reason.value))}


def test_every_metric_has_help_text() -> None:
    metrics = JobServiceMetrics()
    metrics.watch_streams(lambda: 3)
    metrics.watch_change_feed(lambda: 41, lambda: 2)
    families = {f.name: f.documentation for f in metrics.registry.collect()}
    assert all(families.values()), families
    assert families.keys() >= {
        "san_jobs_job_wait_seconds",
        "san_jobs_job_run_seconds",
        "san_jobs_job_outcomes",
        "san_jobs_leases_lost",
        "san_jobs_jobs_pruned",
        "san_jobs_update_streams_open",
        "san_jobs_change_feed_position",
        "san_jobs_change_streams_open",
    }
    assert metrics.registry.get_sample_value("san_jobs_update_streams_open") == 3
    assert metrics.registry.get_sample_value("san_jobs_change_feed_position") == 41
    assert metrics.registry.get_sample_value("san_jobs_change_streams_open") == 2


def test_the_breaker_view_lists_the_pauses_in_force() -> None:
    breaker = DispatchBreaker(
        MemoryJobStore().pauses, BreakerConfig(max_pause=600), lambda: NOW, lambda: 0
    )

    def pause(job_type: JobType, reason: PauseReason, since: float, until: float) -> DispatchPause:
        return DispatchPause(
            job_type,
            reason,
            since=NOW - timedelta(seconds=since),
            until=NOW + timedelta(seconds=until),
            last_error="down",
            opened_by="js-0",
        )

    paused = [
        # Open, past its next probe time: not claimed but for the probe.
        pause(JobType.CARD_ANALYSIS, PauseReason.CIRCUIT_OPEN, 10, -1),
        pause(JobType.TIL_GENERATION, PauseReason.RATE_LIMITED, 10, 5),
        # A rate limit whose time has come, and a pause past --breaker-max-pause: claimed.
        pause(JobType.EMBEDDING, PauseReason.RATE_LIMITED, 10, -1),
        pause(JobType.RECALL_GENERATION, PauseReason.CIRCUIT_OPEN, 601, 5),
    ]
    breaker.pauses = {p.job_type: p for p in paused}
    assert breaker.paused_now() == {
        JobType.CARD_ANALYSIS: PauseReason.CIRCUIT_OPEN,
        JobType.TIL_GENERATION: PauseReason.RATE_LIMITED,
    }
    assert frozenset(breaker.paused_now()) == breaker.skip_types()
