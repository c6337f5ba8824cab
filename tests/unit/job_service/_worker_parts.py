"""Doubles shared by the tests of the worker's parts on their own (test_worker_executor,
_completer, _producer, _rescuer): jobs and claims made by hand or by a MemoryJobStore,
a store that holds the dispatch pauses only (the breaker's), and metrics that record."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime

from san_jobs.job_service.dispatch_breaker import BreakerConfig, DispatchBreaker
from san_jobs.job_service.domain.dispatch import DispatchPause, PauseReason
from san_jobs.job_service.domain.model import Claim, Job, JobType, JsonDict, NewJob
from san_jobs.job_service.domain.ports import (
    ClaimParams,
    EnqueueParams,
    JobStore,
    OpenPauseParams,
    PauseStore,
    TakeProbeParams,
)
from san_jobs.job_service.metrics import NoMetrics
from san_jobs.job_service.storage.memory import MemoryJobStore
from tests.support.virtual_time import running_loop
from tests.unit.job_service.test_gateway_stream_unsent import a_job

RESULT: JsonDict = {"summary": "요약.", "tags": ["scripted"], "embedding": [0.6, 0.8]}
LEASE = 30.0
# Each enqueued job's target: a new one each (one active job per type and target).
_TARGETS = itertools.count(1)


def a_claim(
    *,
    attempt: int = 1,
    max_attempts: int = 3,
    job_id: str = "00000000-0000-4000-8000-000000000001",
) -> Claim:
    """A claim made by hand, for the parts that never see a store."""
    job = replace(a_job(), id=job_id, attempt_count=attempt, max_attempts=max_attempts)
    return Claim(job, job.claim_token or "")


async def enqueue(store: JobStore, count: int = 1, max_attempts: int = 3) -> list[Job]:
    jobs = []
    for _ in range(count):
        new = NewJob(
            JobType.CARD_ANALYSIS,
            f"scrap-{next(_TARGETS)}",
            {"text": "오늘 배운 것."},
            "tester",
            None,
            max_attempts,
        )
        job, _ = await store.commands.enqueue(EnqueueParams(new))
        jobs.append(job)
    return jobs


async def claimed(store: JobStore, max_attempts: int = 3) -> Claim:
    """One job enqueued and claimed (attempt 1) on `store`."""
    await enqueue(store, max_attempts=max_attempts)
    (claim,) = await store.worker.claim(ClaimParams(limit=1, lease_seconds=LEASE))
    return claim


def memory_store() -> MemoryJobStore:
    return MemoryJobStore(clock=running_loop().now)


class PausesOnly:
    """A pause port (domain/ports.PauseStore) of a dict, so a part that reached the job
    store through it would fail with AttributeError."""

    def __init__(self) -> None:
        self.pauses: dict[JobType, DispatchPause] = {}

    def pause(self, job_type: JobType, until: datetime) -> None:
        now = running_loop().now()
        self.pauses[job_type] = DispatchPause(
            job_type, PauseReason.CIRCUIT_OPEN, now, until, "down", "other"
        )

    async def dispatch_pauses(self) -> list[DispatchPause]:
        return list(self.pauses.values())

    async def open_pause(self, params: OpenPauseParams) -> DispatchPause:
        self.pause(params.job_type, params.until)
        return self.pauses[params.job_type]

    async def close_pause(self, job_type: JobType) -> bool:
        return self.pauses.pop(job_type, None) is not None

    async def take_probe(self, params: TakeProbeParams) -> bool:
        return False


def a_breaker(store: PauseStore, clock: Callable[[], datetime] | None = None) -> DispatchBreaker:
    return DispatchBreaker(
        store,
        BreakerConfig(failures=3),
        clock or running_loop().now,
        lambda: asyncio.get_running_loop().time(),
    )


class Recorded(NoMetrics):
    """WorkerMetrics that keep the outcomes and lost leases they are told of."""

    def __init__(self) -> None:
        self.outcomes: list[tuple[str, str]] = []  # (outcome, error code)
        self.lost = 0
        self.retries: list[datetime] = []

    def outcome(self, job_type: JobType, outcome: str, error_code: str = "") -> None:
        self.outcomes.append((outcome, error_code))

    def leases_lost(self, count: int = 1) -> None:
        self.lost += count

    def retry_scheduled(self, job_id: str, due: datetime) -> None:
        self.retries.append(due)


class Published:
    def __init__(self) -> None:
        self.jobs: list[Job] = []

    """The publish callback: every job the part published, in order."""

    def __call__(self, jobs: Iterable[Job]) -> None:
        self.jobs.extend(jobs)
