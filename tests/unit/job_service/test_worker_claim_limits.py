"""The worker's claim limits (--rate-limit, --concurrency-limit; domain/claim_limits.py):
the real Worker over MemoryJobStore and a gateway that records its calls, on the
virtual-time loop (tests/support/virtual_time.py)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from san_jobs.job_service.domain.claim_limits import LimitedClaim, TypeLimit
from san_jobs.job_service.domain.model import (
    GatewayAnswer,
    Job,
    JobStatus,
    JobType,
    NewJob,
    OnDuplicate,
)
from san_jobs.job_service.domain.ports import EnqueueParams, LimitedClaimParams
from san_jobs.job_service.storage.memory import MemoryJobStore
from san_jobs.job_service.storage.memory_worker import MemoryWorkerStore
from san_jobs.job_service.worker import Worker, WorkerConfig
from tests.support.virtual_time import on_virtual_time, running_loop

CARD, TIL = JobType.CARD_ANALYSIS, JobType.TIL_GENERATION


@dataclass
class RecordingGateway:
    latency: float = 0.2
    calls: list[tuple[float, JobType]] = field(default_factory=list)
    running: dict[JobType, int] = field(default_factory=dict)
    most_running: dict[JobType, int] = field(default_factory=dict)
    in_flight: int = 0
    most_in_flight: int = 0

    async def run(self, job: Job, deadline: float) -> GatewayAnswer:
        kind = job.job_type
        self.calls.append((asyncio.get_running_loop().time(), kind))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        self.running[kind] = self.running.get(kind, 0) + 1
        self.most_running[kind] = max(self.most_running.get(kind, 0), self.running[kind])
        await asyncio.sleep(self.latency)
        self.running[kind] -= 1
        self.in_flight -= 1
        return GatewayAnswer({"summary": "ok", "tags": [], "embedding": [1.0]})


class CountingStore(MemoryJobStore):
    def __init__(self, clock: Callable[[], datetime]) -> None:
        super().__init__(clock=clock)
        self.worker = CountingWorker(clock=clock, table=self.table)


class CountingWorker(MemoryWorkerStore):
    """Counts the limited claims: a worker that spun on a limit would make thousands."""

    limited_claims = 0

    async def claim_limited(self, params: LimitedClaimParams) -> LimitedClaim:
        self.limited_claims += 1
        return await super().claim_limited(params)


def max_in_any_second(times: list[float]) -> int:
    """The most calls in any one-second window [t, t + 1) starting at a call."""
    times = sorted(times)
    return max(sum(1 for u in times if t <= u < t + 1.0) for t in times)


async def run_jobs(
    store: CountingStore,
    gateway: RecordingGateway,
    limits: dict[JobType, TypeLimit],
    jobs: list[JobType],
    concurrency: int = 20,
    claim_ahead: int = 0,
) -> list[Job]:
    config = WorkerConfig(
        concurrency=concurrency, claim_ahead=claim_ahead, lease_seconds=30.0, limits=limits
    )
    done = asyncio.Event()

    def published(_jobs: Iterable[Job]) -> None:
        done.set()

    clock = running_loop().now
    worker = Worker(store, gateway, published, config, random.Random(1), clock=clock)
    ids = []
    for n, kind in enumerate(jobs):
        job, _ = await store.commands.enqueue(
            EnqueueParams(
                job=NewJob(kind, f"t-{n}", {"text": "x"}, "tester", None, 3),
                on_duplicate=OnDuplicate.REJECT,
            )
        )
        ids.append(job.id)
    worker.start()
    try:
        async with asyncio.timeout(3600):
            while True:
                finished = await store.queries.get_many(ids)
                if all(j.status is JobStatus.COMPLETED for j in finished):
                    return finished
                done.clear()
                await done.wait()
    finally:
        await worker.stop(grace=10.0)


@on_virtual_time
async def test_rate_limit_paces_the_type_and_does_not_spin() -> None:
    store = CountingStore(clock=running_loop().now)
    gateway = RecordingGateway()
    began = asyncio.get_running_loop().time()
    await run_jobs(store, gateway, {CARD: TypeLimit(per_second=10)}, [CARD] * 50)
    card_calls = [t for t, _ in gateway.calls]
    assert max_in_any_second(card_calls) <= 11  # burst 1 + 10 a second
    took = max(card_calls) - began
    assert 4.5 <= took <= 5.5  # 50 jobs at 10/s, not at once, not slower
    # About one claim per token, not a busy loop.
    assert store.worker.limited_claims <= 200


@on_virtual_time
async def test_concurrency_limit_holds_one_type_and_not_the_others() -> None:
    store = CountingStore(clock=running_loop().now)
    gateway = RecordingGateway(latency=1.0)
    began = asyncio.get_running_loop().time()
    await run_jobs(store, gateway, {CARD: TypeLimit(max_running=3)}, [CARD] * 9 + [TIL] * 9)
    assert gateway.most_running[CARD] == 3
    assert gateway.most_running[TIL] == 9  # unlimited: all at once
    til_done = max(t for t, kind in gateway.calls if kind is TIL) + 1.0 - began
    assert til_done <= 1.2
    card_done = max(t for t, kind in gateway.calls if kind is CARD) + 1.0 - began
    assert 3.0 <= card_done <= 3.5  # three rounds of three
    assert store.worker.limited_claims <= 200


@on_virtual_time
async def test_no_limits_claims_as_before() -> None:
    store = CountingStore(clock=running_loop().now)
    gateway = RecordingGateway()
    await run_jobs(store, gateway, {}, [CARD] * 10)
    assert store.worker.limited_claims == 0
    assert gateway.most_running[CARD] == 10


@on_virtual_time
async def test_claiming_ahead_keeps_the_limits_and_does_not_starve_a_limited_type() -> None:
    # A backlog of an unlimited type keeps every slot busy and as many jobs claimed
    # ahead; the limited type still takes the next slot that frees.
    store = CountingStore(clock=running_loop().now)
    gateway = RecordingGateway(latency=1.0)
    limits = {CARD: TypeLimit(max_running=2, per_second=3)}
    await run_jobs(store, gateway, limits, [TIL] * 40 + [CARD] * 6, concurrency=4, claim_ahead=4)
    assert gateway.most_in_flight == 4  # --workers calls at once, never more
    assert gateway.most_running[CARD] <= 2
    card_calls = [t for t, kind in gateway.calls if kind is CARD]
    assert max_in_any_second(card_calls) <= 3
    last_til = max(t for t, kind in gateway.calls if kind is TIL)
    assert max(card_calls) < last_til  # ran alongside the backlog, not after it
