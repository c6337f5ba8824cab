"""The service's use cases, between the gRPC servicer and the ports: every write
is committed by the store first, then published to streams and, when it makes a
job due, wakes the worker. Changes announced by other instances (PostgreSQL
NOTIFY) come in through `on_remote_change`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from san_jobs.job_service.domain.dispatch import DispatchPause
from san_jobs.job_service.domain.errors import JobNotFoundError
from san_jobs.job_service.domain.failure_groups import FailureGroup, FailureQuery
from san_jobs.job_service.domain.model import (
    Job,
    JobFilter,
    JobStats,
    JobStatus,
    RetryOutcome,
)
from san_jobs.job_service.domain.ports import (
    CancelParams,
    EnqueueOutcome,
    EnqueueParams,
    FailureGroupsParams,
    JobStore,
    ListJobsParams,
    RetryFailedParams,
    UsageTotalsParams,
)
from san_jobs.job_service.domain.usage import UsageQuery, UsageTotal
from san_jobs.job_service.pending_quota import PendingQuota
from san_jobs.job_service.updates import UpdateHub
from san_jobs.job_service.worker import Worker
from san_jobs.shared.batch_logging import log_each

log = logging.getLogger("job_service.app")
# One line per operator action (RetryFailed, CancelJob): who did what to how many jobs.
audit = logging.getLogger("job_service.audit")

GET_MANY_CHUNK = 500


class BatchLoader:
    """Coalesces concurrent reads (e.g. a burst of 1,000 streams opening) into a few
    `get_many` queries instead of one query each."""

    def __init__(self, store: JobStore) -> None:
        self._store = store
        self._waiting: list[tuple[Sequence[str], asyncio.Future[dict[str, Job]]]] = []
        self._scheduled = False

    async def load(self, job_ids: Sequence[str]) -> dict[str, Job]:
        future: asyncio.Future[dict[str, Job]] = asyncio.get_running_loop().create_future()
        self._waiting.append((job_ids, future))
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(self._dispatch()))
        return await future

    async def _dispatch(self) -> None:
        waiting, self._waiting, self._scheduled = self._waiting, [], False
        wanted = list(dict.fromkeys(job_id for ids, _ in waiting for job_id in ids))
        try:
            found: dict[str, Job] = {}
            for start in range(0, len(wanted), GET_MANY_CHUNK):
                for job in await self._store.queries.get_many(
                    wanted[start : start + GET_MANY_CHUNK]
                ):
                    found[job.id] = job
        except Exception as error:
            for _, future in waiting:
                if not future.done():
                    future.set_exception(error)
            return
        for ids, future in waiting:
            if not future.done():
                future.set_result({i: found[i] for i in ids if i in found})


class JobApplication:
    def __init__(
        self,
        store: JobStore,
        hub: UpdateHub,
        worker: Worker,
        instance_id: str,
        attempts_per_round: int,
        pending_quota: PendingQuota | None = None,
    ) -> None:
        # Private: transport reaches the store only through these use cases (servicer ->
        # application -> port), never around them.
        self._store = store
        # --max-pending-per-caller (pending_quota.py); None: no cap.
        self.pending_quota = pending_quota
        self.hub = hub
        self.worker = worker
        self.instance_id = instance_id
        self._attempts_per_round = attempts_per_round
        self._loader = BatchLoader(store)

    # -- commands --------------------------------------------------------------

    async def enqueue(self, params: EnqueueParams) -> tuple[Job, bool]:
        """Enqueue's job, decoded and checked (requests.enqueue), stored as the store
        takes it."""
        quota = self.pending_quota
        tenant = params.job.tenant
        if quota is not None:
            await quota.check(tenant)
        job, deduplicated = await self._store.commands.enqueue(params)
        if quota is not None and not deduplicated and job.status is JobStatus.PENDING:
            quota.added(tenant, 1)
        if not deduplicated:
            # Committed: only now may anyone hear of it.
            log.info(
                "job_id=%s enqueued: %s target_id=%s by %s",
                job.id,
                job.job_type.value,
                job.target_id,
                job.requested_by or "-",
            )
            self.hub.publish([job])
            # One waiting for dependencies is due when the last completes (which wakes
            # a worker); one they ended at once is not due at all.
            if job.status is JobStatus.PENDING and not job.waits_for_dependencies:
                if job.next_attempt_at is not None:  # a delayed job: due then, not now
                    self.worker.due_later([job.next_attempt_at])
                else:
                    self.worker.wake()
        return job, deduplicated

    async def enqueue_many(self, items: Sequence[EnqueueParams]) -> list[EnqueueOutcome]:
        """BatchEnqueue's items, each as `enqueue` would store it: one outcome per
        item, in order (an item's own error as its outcome). The jobs it created are
        published together and wake the worker once. Items past the caller's
        --max-pending-per-caller are refused each (QuotaExceededError), the first ones
        stored."""
        outcomes = await self._enqueue_within_quota(items)
        created = [o[0] for o in outcomes if isinstance(o, tuple) and not o[1]]
        if created:
            # Committed: only now may anyone hear of them. One line per job, as
            # Enqueue logs it (the job_id= line an operator greps for), written
            # together: one record and one write for the batch (batch_logging.py).
            log_each(
                log,
                logging.INFO,
                "job_id=%s enqueued: %s target_id=%s by %s",
                [
                    (job.id, job.job_type.value, job.target_id, job.requested_by or "-")
                    for job in created
                ],
            )
            self.hub.publish(created)
            # Delayed jobs are due later: the worker wakes for each at its time.
            later = {
                job.next_attempt_at
                for job in created
                if job.next_attempt_at is not None and not job.waits_for_dependencies
            }
            if later:
                self.worker.due_later(later)
            else:
                self.worker.wake()
        return outcomes

    async def _enqueue_within_quota(self, items: Sequence[EnqueueParams]) -> list[EnqueueOutcome]:
        quota = self.pending_quota
        if quota is None:
            return await self._store.commands.enqueue_many(items)
        room = {tenant: await quota.room(tenant) for tenant in {i.job.tenant for i in items}}
        kept: list[int] = []
        outcomes: list[EnqueueOutcome | None] = [None] * len(items)
        for index, item in enumerate(items):
            tenant = item.job.tenant
            if room[tenant] > 0:
                room[tenant] -= 1
                kept.append(index)
            else:
                outcomes[index] = quota.refusal(tenant)
        if kept:
            stored = await self._store.commands.enqueue_many([items[i] for i in kept])
            for index, outcome in zip(kept, stored, strict=True):
                outcomes[index] = outcome
                if (
                    isinstance(outcome, tuple)
                    and not outcome[1]
                    and outcome[0].status is JobStatus.PENDING
                ):
                    quota.added(items[index].job.tenant, 1)
        return [outcome for outcome in outcomes if outcome is not None]

    async def cancel(
        self, job_id: str, reason: str, *, actor: str = "-", owner: str | None = None
    ) -> Job:
        """Cancel a job; with `owner`, only one that `owner` requested (any other is
        JobNotFoundError). `actor` names the caller in the audit line."""
        job = await self._store.commands.cancel(
            CancelParams(job_id=job_id, reason=reason, owner=owner)
        )
        audit.info("CancelJob by %s: cancelled 1 job (%s)", actor, job.id)
        log.info("job_id=%s cancelled: %s", job.id, reason or "no reason given")
        self.hub.publish([job])
        self.worker.cancel_local([job.id])
        return job

    async def retry_failed(
        self, job_filter: JobFilter, limit: int, dry_run: bool, requested_by: str
    ) -> RetryOutcome:
        outcome = await self._store.commands.retry_failed(
            RetryFailedParams(
                job_filter=job_filter,
                limit=limit,
                dry_run=dry_run,
                extra_attempts=self._attempts_per_round,
            )
        )
        if dry_run:
            audit.info(
                "RetryFailed (dry run) by %s: %d jobs matched, none moved",
                requested_by or "-",
                outcome.matched_count,
            )
            return outcome
        audit.info(
            "RetryFailed by %s: moved %d jobs FAILED -> PENDING (%d matched, %d skipped)",
            requested_by or "-",
            len(outcome.retried_ids),
            outcome.matched_count,
            len(outcome.skipped),
        )
        for job_id in outcome.retried_ids:
            log.info(
                "job_id=%s moved FAILED -> PENDING by RetryFailed (%s)", job_id, requested_by or "-"
            )
        for job_id, reason in outcome.skipped:
            log.info("job_id=%s skipped by RetryFailed: %s", job_id, reason)
        if outcome.retried_ids:
            moved = await self._loader.load(outcome.retried_ids)
            self.hub.publish(moved.values())
            self.worker.wake()
        return outcome

    # -- queries ---------------------------------------------------------------

    async def get(self, job_id: str, owner: str | None = None) -> Job:
        """One job; JobNotFoundError when none has `job_id`, or (with `owner`) when
        it was requested by someone else."""
        job = (await self.load([job_id], owner)).get(job_id)
        if job is None:
            raise JobNotFoundError(job_id)
        if job.waits_for_dependencies:
            job = (await self._store.queries.with_waiting_on([job]))[0]
        return job

    async def load(self, job_ids: Sequence[str], owner: str | None = None) -> dict[str, Job]:
        """The jobs that exist among `job_ids`, by id; with `owner`, only those it
        requested. (Reads share the coalescing loader, one query for many callers,
        so the owner is applied to its answer rather than in each caller's SQL.)"""
        found = await self._loader.load(job_ids)
        if owner is None:
            return found
        return {i: job for i, job in found.items() if job.requested_by == owner}

    async def list_jobs(
        self, job_filter: JobFilter, page_size: int, page_token: str | None
    ) -> tuple[list[Job], str | None]:
        jobs, next_token = await self._store.queries.list_jobs(
            ListJobsParams(job_filter=job_filter, page_size=page_size, page_token=page_token)
        )
        return await self._store.queries.with_waiting_on(jobs), next_token

    async def stats(self) -> JobStats:
        return await self._store.queries.stats()

    async def usage_totals(
        self, query: UsageQuery, max_groups: int
    ) -> tuple[list[UsageTotal], bool]:
        """GetUsage: usage per (type, model, caller), at most `max_groups` groups."""
        return await self._store.queries.usage_totals(
            UsageTotalsParams(query=query, max_groups=max_groups)
        )

    async def failure_groups(
        self, query: FailureQuery, max_groups: int
    ) -> tuple[list[FailureGroup], bool]:
        """ListFailureGroups: FAILED jobs per cause, at most `max_groups` groups."""
        return await self._store.queries.failure_groups(
            FailureGroupsParams(query=query, max_groups=max_groups)
        )

    async def dispatch_pauses(self) -> list[DispatchPause]:
        """Every paused job type (GetJobStats and the pages; the servicer caches it)."""
        return await self._store.pauses.dispatch_pauses()

    # -- other instances -------------------------------------------------------

    async def on_remote_change(self, origin: str, status: str, job_ids: list[str]) -> None:
        """Another instance committed changes to `job_ids` (PostgreSQL NOTIFY)."""
        if origin == self.instance_id:
            return  # already published locally, right after our own commit
        if status == JobStatus.PENDING.value:
            # Due now (a new or retried job), or a retry due later that the instance
            # which scheduled it will run; the periodic check finds it otherwise.
            self.worker.wake()
        elif status == JobStatus.CANCELLED.value:
            self.worker.cancel_local(job_ids)
        watched = self.hub.watched_ids(job_ids)
        if watched:
            jobs = await self._loader.load(watched)
            self.hub.publish(jobs.values())

    async def on_dependencies_ended(self, job_ids: list[str]) -> None:
        """Jobs with dependents ended here (SQLite: no NOTIFY): their dependents are
        due or CANCELLED already (the trigger of 0017). Wake the worker, tell streams."""
        self.worker.wake()
        try:
            ended, seen = list(job_ids), set(job_ids)
            while ended:  # a dependent the trigger cancelled ended its own dependents
                dependents = [
                    i for i in await self._store.queries.dependents_moved_by(ended) if i not in seen
                ]
                seen.update(dependents)
                jobs = await self._store.queries.get_many(dependents)
                self.hub.publish(jobs)  # watchers by id and by filter, and the change feed
                ended = [j.id for j in jobs if j.has_dependents and j.status is JobStatus.CANCELLED]
        except Exception:  # streams poll too; the worker is awake either way
            log.exception("job_ids=%s: the dependents' news was not published", ",".join(job_ids))

    async def on_notifications_reconnected(self) -> None:
        """Notifications may have been missed while disconnected: re-read every watched job."""
        self.worker.wake(recheck=True)
        watched = self.hub.all_watched_ids()
        if watched:
            jobs = await self._loader.load(watched)
            self.hub.publish(jobs.values())
