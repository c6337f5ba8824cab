"""The worker's rescuer on its own: the leases it holds are renewed every third of a
lease in one statement, a lease no longer ours stops its call, a dropped one is left
alone, and the jobs whose last lease expired are failed. Over MemoryJobStore on a
virtual-time loop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from san_jobs.job_service.domain.model import JobStatus
from san_jobs.job_service.domain.ports import RenewLeasesParams
from san_jobs.job_service.domain.transitions import LEASE_EXPIRED_CODE
from san_jobs.job_service.metrics import FAILED
from san_jobs.job_service.storage.memory import MemoryJobStore
from san_jobs.job_service.storage.memory_rows import MemoryTable
from san_jobs.job_service.storage.memory_worker import MemoryWorkerStore
from san_jobs.job_service.worker import WorkerConfig
from san_jobs.job_service.worker.rescuer import Rescuer
from tests.support.virtual_time import on_virtual_time, running_loop
from tests.unit.job_service._worker_parts import LEASE, Published, Recorded, claimed


class RenewalsSeen(MemoryWorkerStore):
    def __init__(self, table: MemoryTable) -> None:
        super().__init__(clock=running_loop().now, table=table)
        self.renewals: list[tuple[float, list[str]]] = []  # (loop time, job ids)

    async def renew_leases(self, params: RenewLeasesParams) -> set[str]:
        self.renewals.append((running_loop().time(), [job_id for job_id, _ in params.leases]))
        return await super().renew_leases(params)


class Rig:
    def __init__(self) -> None:
        self.store = MemoryJobStore(clock=running_loop().now)
        self.store.worker = RenewalsSeen(self.store.table)
        self.published = Published()
        self.metrics = Recorded()
        self.lost: list[list[str]] = []
        self.rescuer = Rescuer(
            self.store.worker,
            self.published,
            WorkerConfig(lease_seconds=LEASE),
            self.metrics,
            on_lost=self.lost.append,
        )


@asynccontextmanager
async def renewing() -> AsyncIterator[Rig]:
    rig = Rig()
    rig.rescuer.start()
    try:
        yield rig
    finally:
        await rig.rescuer.stop()


@on_virtual_time
async def test_held_leases_are_renewed_every_third_of_a_lease_in_one_statement() -> None:
    async with renewing() as rig:
        claims = [await claimed(rig.store), await claimed(rig.store)]
        for claim in claims:
            rig.rescuer.hold(claim.job.id, claim.token)
        await asyncio.sleep(LEASE * 2 - 1)  # about twice a lease: alive all along

        ids = sorted(c.job.id for c in claims)
        assert [sorted(seen) for _, seen in rig.store.worker.renewals] == [ids] * 5
        assert [at for at, _ in rig.store.worker.renewals] == pytest.approx(
            [LEASE / 3 * n for n in range(1, 6)]
        )
        for claim in claims:
            job = await rig.store.queries.get(claim.job.id)
            assert job.status is JobStatus.PROCESSING and job.lease_expires_at is not None
            assert job.lease_expires_at > running_loop().now()
    assert rig.lost == []


@on_virtual_time
async def test_a_dropped_lease_is_not_renewed() -> None:
    async with renewing() as rig:
        claim = await claimed(rig.store)
        rig.rescuer.hold(claim.job.id, claim.token)
        rig.rescuer.drop(claim.job.id)  # its outcome is being written
        await asyncio.sleep(LEASE)
    assert rig.store.worker.renewals == []


@on_virtual_time
async def test_a_lease_no_longer_ours_stops_its_call(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="job_service.worker")
    async with renewing() as rig:
        ours, taken = await claimed(rig.store), await claimed(rig.store)
        rig.rescuer.hold(ours.job.id, ours.token)
        rig.rescuer.hold(taken.job.id, "a token another claim replaced")
        await asyncio.sleep(LEASE / 3 + 0.01)

    assert rig.lost == [[taken.job.id]]
    assert rig.metrics.lost == 1
    assert f"job_id={taken.job.id}: lease lost; stopping its gateway call" in caplog.messages


@on_virtual_time
async def test_the_jobs_whose_last_lease_expired_are_failed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rig = Rig()  # nobody renews: this instance crashed, say
    last = await claimed(rig.store, max_attempts=1)
    with_attempts_left = await claimed(rig.store, max_attempts=3)
    await asyncio.sleep(LEASE + 1)

    await rig.rescuer.fail_exhausted()

    (failed,) = rig.published.jobs
    assert failed.id == last.job.id and failed.status is JobStatus.FAILED
    assert failed.error_code == LEASE_EXPIRED_CODE
    assert rig.metrics.outcomes == [(FAILED, LEASE_EXPIRED_CODE)]
    assert f"job_id={last.job.id} failed: lease expired on its last attempt" in caplog.messages
    left = await rig.store.queries.get(with_attempts_left.job.id)
    assert left.status is JobStatus.PROCESSING, "the next claim takes it again"
