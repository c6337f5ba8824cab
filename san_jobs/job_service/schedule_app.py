"""The schedules' use cases, between the six schedule RPCs (transport/schedules.py:
decode, call this, encode) and the schedules' port (domain/ports.ScheduleStore). Apart
from JobApplication (app.py), the jobs' use cases: the two share no state, and the
firing of periods is the firer's (schedule_firer.py).

The rules held here are whose a schedule is and how many one may have:
- Ids are scoped as request ids are: under --auth token the caller's name is the
  schedule's tenant; a submitter (`ScheduleCaller.own_only`) reaches only its own
  (another's is ScheduleNotFoundError, so ids cannot be probed), an operator or
  viewer everyone's (its own first when two callers use the same id; of several
  others', none: InvalidRequestError names their owners).
- Issue 42, point 6: an authenticated caller has at most --max-schedules-per-caller
  schedules (a new one past it: ScheduleQuotaError naming the cap); under --auth off
  there is one tenant, everyone's, and no cap.
- A schedule created running, or resumed, has the firing loop look at the next fire
  time again (`replan`), rather than at its next poll.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from san_jobs.job_service.domain.errors import FieldViolation, InvalidRequestError
from san_jobs.job_service.domain.ports import (
    CreateScheduleParams,
    FindSchedulesParams,
    ListSchedulesParams,
    ScheduleKey,
    ScheduleStore,
)
from san_jobs.job_service.domain.schedules import NewSchedule, Schedule, ScheduleNotFoundError

# Of several callers' schedules of one id, the owners an ambiguous lookup names.
OWNERS_NAMED = 5


@dataclass(frozen=True, slots=True)
class ScheduleCaller:
    """Who calls, as the schedule rules see it (the transport reads it from the call's
    authentication)."""

    # Its name: the tenant whose schedule of an id it reaches first; "" under --auth
    # off (one tenant, everyone's).
    tenant: str = ""
    # A submitter: no other caller's schedule exists for it.
    own_only: bool = False
    # Authenticated: its new schedules count against --max-schedules-per-caller.
    authenticated: bool = False


class ScheduleApplication:
    """CreateSchedule, GetSchedule, ListSchedules, DeleteSchedule, PauseSchedule and
    ResumeSchedule on the schedules' port. `replan`: the firing loop's (called once a
    schedule may fire sooner than the loop planned); `max_per_caller`:
    --max-schedules-per-caller (None: no cap)."""

    def __init__(
        self,
        store: ScheduleStore,
        *,
        replan: Callable[[], None] = lambda: None,
        max_per_caller: int | None = None,
    ) -> None:
        self._store = store
        self._replan = replan
        self._max_per_caller = max_per_caller

    async def create(self, new: NewSchedule, caller: ScheduleCaller) -> Schedule:
        """Store `new` (its tenant and owner already the caller's), or return the
        stored one of an equal definition (a retry)."""
        cap = self._max_per_caller if caller.authenticated else None
        stored, created = await self._store.create_schedule(CreateScheduleParams(new, cap))
        if created and not stored.paused:
            self._replan()
        return stored

    async def get(self, schedule_id: str, caller: ScheduleCaller) -> Schedule:
        """The schedule of `schedule_id` that `caller` reaches (the module's docstring)."""
        tenant = caller.tenant
        found = await self._store.find_schedules(
            FindSchedulesParams(schedule_id, tenant if caller.own_only else None)
        )
        own = [s for s in found if s.tenant == tenant]
        if own:
            return own[0]
        if len(found) == 1:
            return found[0]
        if not found:
            raise ScheduleNotFoundError(schedule_id)
        owners = ", ".join(s.requested_by or "-" for s in found[:OWNERS_NAMED])
        raise InvalidRequestError(
            [
                FieldViolation(
                    "schedule_id", f"several callers have a schedule of this id ({owners})"
                )
            ]
        )

    async def list(
        self, caller: ScheduleCaller, page_size: int, after: tuple[str, str] | None
    ) -> tuple[list[Schedule], tuple[str, str] | None]:
        """A page of the schedules `caller` reaches, by (schedule_id, tenant) after
        `after`; and the key to pass as `after` for the next (None: the last)."""
        tenant = caller.tenant if caller.own_only else None
        return await self._store.list_schedules(ListSchedulesParams(tenant, page_size, after))

    async def delete(self, schedule_id: str, caller: ScheduleCaller) -> None:
        """Remove the schedule `caller` reaches (its jobs stay)."""
        found = await self.get(schedule_id, caller)
        if not await self._store.delete_schedule(_key(found)):
            raise ScheduleNotFoundError(schedule_id)  # deleted meanwhile

    async def pause(self, schedule_id: str, caller: ScheduleCaller) -> Schedule:
        found = await self.get(schedule_id, caller)
        paused = await self._store.pause_schedule(_key(found))
        if paused is None:
            raise ScheduleNotFoundError(schedule_id)
        return paused

    async def resume(self, schedule_id: str, caller: ScheduleCaller) -> Schedule:
        found = await self.get(schedule_id, caller)
        resumed = await self._store.resume_schedule(_key(found))
        if resumed is None:
            raise ScheduleNotFoundError(schedule_id)
        self._replan()
        return resumed


def _key(schedule: Schedule) -> ScheduleKey:
    return ScheduleKey(schedule.tenant, schedule.schedule_id)
