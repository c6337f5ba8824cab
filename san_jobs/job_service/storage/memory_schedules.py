"""MemoryScheduleStore: the schedules' port (domain/ports.ScheduleStore) on a MemoryTable
(storage/schedules.py is the SQL twin): the same operations and the same firing
round, atomic because nothing awaits in between. The store's clock is the schedules'
clock (SqlScheduleStore uses the database's on PostgreSQL)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime

from san_jobs.job_service.domain.errors import DuplicateJobError
from san_jobs.job_service.domain.model import ACTIVE_STATUSES, Job, OnDuplicate
from san_jobs.job_service.domain.ports import (
    CreateScheduleParams,
    FindSchedulesParams,
    FireDueParams,
    ListSchedulesParams,
    ScheduleKey,
)
from san_jobs.job_service.domain.schedules import (
    PER_OWNER_IN_ROUND,
    WAITING_RECHECK,
    FireOutcome,
    Schedule,
    ScheduleExistsError,
    ScheduleQuotaError,
    anchor_of,
    fires,
    job_of_period,
    next_period,
    periods_passed,
    plan_fire,
)
from san_jobs.job_service.storage.apply_transition import status_of
from san_jobs.job_service.storage.memory_commands import MemoryJobCommands
from san_jobs.job_service.storage.memory_rows import MemoryRows, MemoryTable
from san_jobs.job_service.storage.rows import utc_now

Key = tuple[str, str]  # (tenant, schedule_id)


class MemoryScheduleStore(MemoryRows):
    """The schedules' port on a MemoryTable; a period's job is enqueued through the job
    commands on the same table, as any Enqueue is."""

    def __init__(
        self,
        *,
        commands: MemoryJobCommands,
        clock: Callable[[], datetime] = utc_now,
        table: MemoryTable | None = None,
    ) -> None:
        super().__init__(clock=clock, table=table)
        self._commands = commands

    def _schedule_now(self) -> datetime:
        return self._clock().astimezone(UTC)

    @property
    def _schedules(self) -> dict[Key, Schedule]:
        return self.table.schedules

    async def create_schedule(self, params: CreateScheduleParams) -> tuple[Schedule, bool]:
        """No token owns a schedule here (the memory store has no api_tokens): its
        owner_token_id is None, and it is never held."""
        await asyncio.sleep(0)
        new, max_per_tenant = params.schedule, params.max_per_tenant
        key = (new.tenant, new.schedule_id)
        stored = self._schedules.get(key)
        if stored is not None:
            if stored.definition != new.definition:
                raise ScheduleExistsError(new.schedule_id)
            return stored, False
        if max_per_tenant is not None:
            owned = sum(1 for tenant, _ in self._schedules if tenant == new.tenant)
            if owned >= max_per_tenant:
                raise ScheduleQuotaError(new.tenant, max_per_tenant)
        now = self._schedule_now()
        created = Schedule(
            schedule_id=new.schedule_id,
            definition=new.definition,
            paused=new.paused,
            requested_by=new.requested_by,
            tenant=new.tenant,
            next_fire_at=next_period(new.definition, anchor_of(now), now),
            last_fire_at=None,
            last_job_id=None,
            skipped_count=0,
            created_at=now,
            updated_at=now,
        )
        self._schedules[key] = created
        return created, True

    async def find_schedules(self, params: FindSchedulesParams) -> list[Schedule]:
        await asyncio.sleep(0)
        schedule_id, tenant = params.schedule_id, params.tenant
        return sorted(
            (
                s
                for (t, i), s in self._schedules.items()
                if i == schedule_id and (tenant is None or t == tenant)
            ),
            key=lambda s: s.tenant,
        )

    async def list_schedules(
        self, params: ListSchedulesParams
    ) -> tuple[list[Schedule], tuple[str, str] | None]:
        await asyncio.sleep(0)
        tenant, page_size, after = params.tenant, params.page_size, params.after
        ordered = sorted(
            (s for s in self._schedules.values() if tenant is None or s.tenant == tenant),
            key=lambda s: (s.schedule_id, s.tenant),
        )
        if after is not None:
            ordered = [s for s in ordered if (s.schedule_id, s.tenant) > after]
        page = ordered[:page_size]
        more = len(ordered) > page_size
        return page, (page[-1].schedule_id, page[-1].tenant) if more and page else None

    async def delete_schedule(self, key: ScheduleKey) -> bool:
        await asyncio.sleep(0)
        return self._schedules.pop((key.tenant, key.schedule_id), None) is not None

    async def pause_schedule(self, key: ScheduleKey) -> Schedule | None:
        await asyncio.sleep(0)
        stored = self._schedules.get((key.tenant, key.schedule_id))
        if stored is None or stored.paused:
            return stored
        paused = dataclasses.replace(stored, paused=True, updated_at=self._schedule_now())
        self._schedules[key.tenant, key.schedule_id] = paused
        return paused

    async def resume_schedule(self, key: ScheduleKey) -> Schedule | None:
        await asyncio.sleep(0)
        stored = self._schedules.get((key.tenant, key.schedule_id))
        if stored is None or not stored.paused:
            return stored
        now = self._schedule_now()
        passed, upcoming = periods_passed(
            stored.definition, anchor_of(stored.created_at), stored.next_fire_at, now
        )
        resumed = dataclasses.replace(
            stored,
            paused=False,
            next_fire_at=upcoming,
            skipped_count=stored.skipped_count + passed,
            updated_at=now,
        )
        self._schedules[key.tenant, key.schedule_id] = resumed
        return resumed

    async def next_schedule_fire_at(self) -> datetime | None:
        await asyncio.sleep(0)
        running = [
            s.next_fire_at for s in self._schedules.values() if not s.paused and not self._waits(s)
        ]
        return min(running, default=None)

    async def fire_due_schedules(self, params: FireDueParams) -> list[FireOutcome]:
        """As storage/schedules.py: a waiting period is not due (looked at again
        every WAITING_RECHECK); each owner's first before anyone's second, at most
        PER_OWNER_IN_ROUND of one owner."""
        await asyncio.sleep(0)
        now = self._schedule_now()
        by_owner: dict[tuple[str, str], list[Schedule]] = {}
        for s in sorted(self._schedules.values(), key=lambda s: (s.next_fire_at, s.schedule_id)):
            if s.paused or s.next_fire_at > now:
                continue
            if self._waits(s) and s.updated_at > now - WAITING_RECHECK:
                continue
            by_owner.setdefault((s.tenant, s.requested_by), []).append(s)
        ranked = [
            (rank, s.next_fire_at, s)
            for owned in by_owner.values()
            for rank, s in enumerate(owned[:PER_OWNER_IN_ROUND])
        ]
        ranked.sort(key=lambda entry: entry[:2])
        return [self._fire_round(s, now) for _, _, s in ranked[: params.limit]]

    def _waits(self, schedule: Schedule) -> bool:
        """Its due period would wait for its previous job (a catch-up window, and
        that job still active)."""
        return bool(schedule.definition.catchup_window) and bool(self._previous_active(schedule))

    def _previous_active(self, schedule: Schedule) -> str:
        row = self.table.rows.get(schedule.last_job_id) if schedule.last_job_id else None
        if row is None or status_of(row) not in ACTIVE_STATUSES:
            return ""
        return f"the previous period's job {schedule.last_job_id} is still {status_of(row)}"

    def _fire_round(self, due: Schedule, now: datetime) -> FireOutcome:
        plan = plan_fire(due.definition, anchor_of(due.created_at), due.next_fire_at, now)
        key = (due.tenant, due.schedule_id)
        overlap = self._previous_active(due) if fires(plan) else ""
        skipped = due.skipped_count + plan.skipped
        if overlap and due.definition.catchup_window:  # waits for it (storage/schedules.py)
            self._schedules[key] = dataclasses.replace(
                due, next_fire_at=plan.fire, skipped_count=skipped, updated_at=now
            )
            return FireOutcome(due, plan.fire, None, False, plan.skipped, overlap, waiting=True)
        moved = dataclasses.replace(
            due, next_fire_at=plan.next_fire_at, skipped_count=skipped, updated_at=now
        )
        if not fires(plan):
            self._schedules[key] = moved
            return FireOutcome(due, None, None, False, plan.skipped, "older than catch-up")
        reason = overlap
        job: Job | None = None
        deduplicated = False
        if not reason:
            try:
                job, deduplicated = self._commands.enqueue_now(
                    job_of_period(due, plan.fire), OnDuplicate.REJECT
                )
            except DuplicateJobError as error:
                reason = (
                    f"the target has an active job {error.existing_job_id} (not this schedule's)"
                )
        if job is None:
            self._schedules[key] = dataclasses.replace(moved, skipped_count=skipped + 1)
            return FireOutcome(due, plan.fire, None, False, plan.skipped + 1, reason)
        self._schedules[key] = dataclasses.replace(
            moved, last_fire_at=plan.fire, last_job_id=job.id
        )
        return FireOutcome(due, plan.fire, job, deduplicated, plan.skipped)
