"""The rescuer: keeps alive the lease of every job in flight (one statement for all,
every lease/3 seconds) and stops the calls of the jobs that turn out no longer ours;
and fails the jobs whose lease expired on their last attempt (on any instance: a
crashed one's jobs too). A job whose lease expired with attempts left needs no
rescue: the next claim takes it again."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from san_jobs.job_service.domain.errors import StorageError
from san_jobs.job_service.domain.model import Job
from san_jobs.job_service.domain.ports import RenewLeasesParams, WorkerStore
from san_jobs.job_service.metrics import FAILED, WorkerMetrics
from san_jobs.job_service.worker.config import WorkerConfig, log
from san_jobs.shared.background import BackgroundLoop


class Rescuer:
    def __init__(
        self,
        store: WorkerStore,
        publish: Callable[[Iterable[Job]], None],
        config: WorkerConfig,
        metrics: WorkerMetrics,
        on_lost: Callable[[list[str]], None],
    ) -> None:
        """`on_lost(job_ids)`: jobs in flight here that renewal found no longer ours
        (claimed again, or cancelled): their calls must stop."""
        self._store = store
        self._publish = publish
        self.config = config
        self._metrics = metrics
        self._on_lost = on_lost
        # Claim token of every job in flight whose outcome is not being written yet:
        # the leases the renewal loop keeps alive.
        self._held: dict[str, str] = {}
        self._loop = BackgroundLoop("worker-leases", self._renew_leases)

    def hold(self, job_id: str, token: str) -> None:
        self._held[job_id] = token

    def drop(self, job_id: str) -> None:
        """Stop renewing the job's lease (its outcome is being written, or it is done)."""
        self._held.pop(job_id, None)

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    async def fail_exhausted(self) -> None:
        """Fail the jobs whose last lease expired. StorageError propagates (the
        caller's due check logs it)."""
        exhausted = await self._store.fail_exhausted_leases()
        if exhausted:
            for job in exhausted:
                log.warning("job_id=%s failed: lease expired on its last attempt", job.id)
                self._metrics.outcome(job.job_type, FAILED, job.error_code or "")
            self._publish(exhausted)

    async def _renew_leases(self) -> None:
        """Every lease/3 seconds, push the lease of every job in flight forward (one
        statement for all); stop the gateway calls of jobs that are no longer ours."""
        interval = max(self.config.lease_seconds / 3.0, 0.05)
        while True:
            await asyncio.sleep(interval)
            held = list(self._held.items())
            if not held:
                continue
            try:
                owned = await self._store.renew_leases(
                    RenewLeasesParams(leases=held, lease_seconds=self.config.lease_seconds)
                )
            except StorageError as error:
                log.warning("lease renewal of %d jobs failed: %s", len(held), error)
                continue
            # Still in flight and not ours any more (claimed again, or cancelled).
            lost = [job_id for job_id, _ in held if job_id not in owned and job_id in self._held]
            for job_id in lost:
                log.warning("job_id=%s: lease lost; stopping its gateway call", job_id)
            if lost:
                self._metrics.leases_lost(len(lost))
                self._on_lost(lost)
