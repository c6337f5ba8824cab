"""What the worker reports to its metrics (san_jobs.job_service.metrics): the real Worker over
MemoryJobStore and a scripted gateway, on the virtual-time loop."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from san_jobs.job_service.dispatch_breaker import BreakerConfig
from san_jobs.job_service.domain.backoff import BackoffPolicy
from san_jobs.job_service.domain.failures import GatewayCallError
from san_jobs.job_service.domain.model import (
    GatewayAnswer,
    Job,
    JobStatus,
    JobType,
    JsonDict,
    NewJob,
    OnDuplicate,
)
from san_jobs.job_service.domain.ports import CancelParams, EnqueueParams
from san_jobs.job_service.metrics import JobServiceMetrics
from san_jobs.job_service.storage.memory import MemoryJobStore
from san_jobs.job_service.worker import Worker, WorkerConfig
from tests.support.virtual_time import on_virtual_time, running_loop

RESULT: JsonDict = {"summary": "s", "tags": ["t"], "embedding": [0.6, 0.8]}
UNAVAILABLE = GatewayCallError("UNAVAILABLE", "", "connection refused")
INVALID = GatewayCallError("INVALID_ARGUMENT", "TOKEN_LIMIT_EXCEEDED", "Token limit exceeded")
CARD = JobType.CARD_ANALYSIS


@dataclass
class ScriptedGateway:
    """Per target id, the failures to raise on its first calls; then RESULT. A target
    named "slow" takes an hour."""

    script: dict[str, list[GatewayCallError]] = field(default_factory=dict)
    started: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self, job: Job, deadline: float) -> GatewayAnswer:
        self.started.set()
        await asyncio.sleep(3600 if job.target_id == "slow" else 0.5)
        failures = self.script.get(job.target_id, [])
        if failures:
            raise failures.pop(0)
        return GatewayAnswer(dict(RESULT))


@dataclass
class Rig:
    store: MemoryJobStore
    worker: Worker
    metrics: JobServiceMetrics
    changed: asyncio.Event

    async def enqueue(self, target: str, max_attempts: int = 3) -> str:
        new = NewJob(CARD, target, {"text": "x"}, "tester", None, max_attempts)
        job, _ = await self.store.commands.enqueue(
            EnqueueParams(job=new, on_duplicate=OnDuplicate.REJECT)
        )
        self.worker.wake()
        return job.id

    async def until(self, job_id: str, status: JobStatus) -> None:
        async with asyncio.timeout(3600):
            while (await self.store.queries.get(job_id)).status is not status:
                self.changed.clear()
                await self.changed.wait()

    def value(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0

    def outcomes(self, outcome: str, error_code: str = "") -> float:
        labels = {"job_type": CARD.value, "outcome": outcome, "error_code": error_code}
        return self.value("san_jobs_job_outcomes_total", **labels)


@asynccontextmanager
async def rig(gateway: ScriptedGateway) -> AsyncIterator[Rig]:
    clock = running_loop().now
    store = MemoryJobStore(clock=clock)
    metrics = JobServiceMetrics(clock=clock)
    config = WorkerConfig(
        concurrency=2,
        lease_seconds=30.0,
        backoff=BackoffPolicy(base_delay=1.0, max_delay=5.0),
        breaker=BreakerConfig(instance_id="unit"),
    )
    changed = asyncio.Event()

    def published(_jobs: Iterable[Job]) -> None:
        changed.set()

    worker = Worker(
        store, gateway, published, config, random.Random(3), clock=clock, metrics=metrics
    )
    worker.start()
    try:
        yield Rig(store, worker, metrics, changed)
    finally:
        await worker.stop(grace=60.0)


@on_virtual_time
async def test_each_attempt_is_counted_with_its_outcome_wait_and_run() -> None:
    gateway = ScriptedGateway({"flaky": [UNAVAILABLE], "bad": [INVALID]})
    async with rig(gateway) as r:
        flaky = await r.enqueue("flaky")
        bad = await r.enqueue("bad")
        await r.until(flaky, JobStatus.COMPLETED)
        await r.until(bad, JobStatus.FAILED)
        assert r.outcomes("retried", "UNAVAILABLE") == 1
        assert r.outcomes("completed") == 1
        assert r.outcomes("failed", "INVALID_ARGUMENT") == 1
        card = {"job_type": CARD.value}
        # Three attempts, each run 0.5 s on the virtual clock.
        assert r.value("san_jobs_job_run_seconds_count", **card) == 3
        assert r.value("san_jobs_job_run_seconds_sum", **card) >= 1.5
        # Three waits; the retry's from its due time (it was claimed when due), so
        # the three together are far below the retry's delay after the enqueue.
        assert r.value("san_jobs_job_wait_seconds_count", **card) == 3
        assert r.value("san_jobs_job_wait_seconds_sum", **card) < 0.5

        slow = await r.enqueue("slow")
        gateway.started.clear()
        await gateway.started.wait()
        await r.until(slow, JobStatus.PROCESSING)
        await r.store.commands.cancel(CancelParams(job_id=slow, reason="operator", owner=None))
        r.worker.cancel_local([slow])
        await asyncio.sleep(1)
        assert r.outcomes("cancelled", "CANCELLED") == 1
        assert r.value("san_jobs_leases_lost_total") == 0
