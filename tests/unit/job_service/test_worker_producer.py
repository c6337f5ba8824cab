"""The worker's producer on its own: how many jobs it claims (the free call slots and
the jobs claimed ahead, no more), and when (a wake-up, the next due time it knows of,
a retry it was told of), over MemoryJobStore on a virtual-time loop; the claims are
handed to a list, not run."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta

import pytest

from san_jobs.job_service.domain.errors import StorageUnavailableError
from san_jobs.job_service.domain.model import Claim, Failure
from san_jobs.job_service.domain.ports import ClaimParams, FailParams
from san_jobs.job_service.storage.memory import MemoryJobStore
from san_jobs.job_service.storage.memory_rows import MemoryTable
from san_jobs.job_service.storage.memory_worker import MemoryWorkerStore
from san_jobs.job_service.worker import WorkerConfig
from san_jobs.job_service.worker.producer import Producer
from tests.support.virtual_time import on_virtual_time, running_loop
from tests.unit.job_service._worker_parts import LEASE, Published, a_breaker, enqueue

UNAVAILABLE = Failure("UNAVAILABLE", "", "AI gateway unavailable: down", transient=True)


class CountingStore(MemoryWorkerStore):
    def __init__(self, table: MemoryTable) -> None:
        super().__init__(clock=running_loop().now, table=table)
        self.calls: list[str] = []

    async def claim(self, params: ClaimParams) -> list[Claim]:
        self.calls.append("claim")
        return await super().claim(params)

    async def next_due_at(self) -> datetime | None:
        self.calls.append("next_due_at")
        return await super().next_due_at()


class Rig:
    def __init__(self, config: WorkerConfig) -> None:
        self.store = MemoryJobStore(clock=running_loop().now)
        self.store.worker = CountingStore(self.store.table)
        self.published = Published()
        self.started: list[tuple[float, Claim]] = []  # (loop time, claim)
        self.done: set[str] = set()
        self.rescue_error: Exception | None = None
        self.producer = Producer(
            self.store.worker,
            a_breaker(self.store.pauses),
            self.published,
            config,
            clock=running_loop().now,
            in_flight=lambda: len(self.started) - len(self.done),
            start=lambda claim, _probe: self.started.append((running_loop().time(), claim)),
            rescue=self._rescue,
        )

    async def _rescue(self) -> None:
        self.store.worker.calls.append("rescue")
        if self.rescue_error is not None:
            raise self.rescue_error

    def finish(self, claim: Claim) -> None:
        """What the pool does when a job's task ends."""
        self.done.add(claim.job.id)
        self.producer.finished(claim.job.id)


@asynccontextmanager
async def running(**settings: float) -> AsyncIterator[Rig]:
    rig = Rig(WorkerConfig(**settings))  # type: ignore[arg-type]
    rig.producer.start()
    try:
        yield rig
    finally:
        await rig.producer.stop()


async def a_retry_due_in(store: MemoryJobStore, seconds: float) -> datetime:
    """A job failed as another instance's completer would write it: PENDING again,
    due in `seconds`."""
    await enqueue(store)
    (claim,) = await store.worker.claim(ClaimParams(limit=1, lease_seconds=LEASE))
    retry_at = running_loop().now() + timedelta(seconds=seconds)
    await store.worker.fail(
        FailParams(
            job_id=claim.job.id,
            token=claim.token,
            failure=UNAVAILABLE,
            retry_at=retry_at,
            claimed=claim.job,
        )
    )
    return retry_at


@pytest.mark.parametrize(("claim_ahead", "taken"), [(0, 2), (1, 3), (-1, 2)])
@on_virtual_time
async def test_it_claims_the_free_slots_and_the_claim_ahead_no_more(
    claim_ahead: int, taken: int
) -> None:
    async with running(concurrency=2, claim_ahead=claim_ahead) as rig:
        await enqueue(rig.store, 5)
        rig.producer.wake()
        await asyncio.sleep(0.5)
        assert len(rig.started) == taken
        assert [c.job for _, c in rig.started] == rig.published.jobs, "claims published"

        rig.finish(rig.started[0][1])  # a place frees: one more, at once
        await asyncio.sleep(0.01)
        assert len(rig.started) == taken + 1


@on_virtual_time
async def test_a_wake_up_while_every_place_is_taken_claims_nothing() -> None:
    async with running(concurrency=1, poll_interval=60.0) as rig:
        await enqueue(rig.store, 2)
        rig.producer.wake()
        await asyncio.sleep(1)
        assert len(rig.started) == 1
        claims_before = rig.store.worker.calls.count("claim")

        for _ in range(10):  # enqueues on a full pool: no claim statement each
            rig.producer.wake()
            await asyncio.sleep(0.1)
        assert rig.store.worker.calls.count("claim") == claims_before

        rig.finish(rig.started[0][1])
        await asyncio.sleep(0.01)
        assert len(rig.started) == 2


@on_virtual_time
async def test_it_wakes_at_the_next_due_time_not_the_next_poll() -> None:
    async with running(poll_interval=60.0) as rig:
        await a_retry_due_in(rig.store, 10)
        rig.producer.wake(recheck=True)  # due times changed elsewhere: ask again
        await asyncio.sleep(30)

    ((at, _),) = rig.started
    assert 10 <= at < 10.01


@on_virtual_time
async def test_a_retry_it_was_told_of_wakes_it_without_asking_the_database() -> None:
    async with running(poll_interval=60.0) as rig:
        await asyncio.sleep(1)  # the first due check is done: nothing due
        checks = rig.store.worker.calls.count("next_due_at")
        due = await a_retry_due_in(rig.store, 5)  # as this worker's completer writes it
        rig.producer.retry_scheduled(due)
        rig.producer.wake()  # as the end of the attempt's task does
        await asyncio.sleep(30)

        ((at, _),) = rig.started
        assert 6 <= at < 6.01
        assert rig.store.worker.calls.count("next_due_at") == checks, "known without a query"


@on_virtual_time
async def test_the_due_check_rescues_first_and_survives_a_database_blip(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="job_service.worker")
    async with running(poll_interval=1.0) as rig:
        await asyncio.sleep(0.5)
        assert rig.store.worker.calls[-2:] == ["rescue", "next_due_at"]
        rig.rescue_error = StorageUnavailableError("connection refused")
        await asyncio.sleep(1)
        assert "due check failed: connection refused" in caplog.messages
        rig.rescue_error = None
        await enqueue(rig.store)
        rig.producer.wake()
        await asyncio.sleep(0.01)
        assert len(rig.started) == 1, "the loop went on"
