"""Schedules on the database: the rows of `job_schedules` (domain/schedules.py says
what they mean) and the firing of due periods.

Firing is exactly once per period across instances: each round of a due schedule is
ONE transaction that first moves `next_fire_at` on with a conditional UPDATE
(`WHERE next_fire_at = <the due value> AND next_fire_at <= <the database's now>`),
so of the instances that try, only the first to commit wins the period (the
others' UPDATE, after waiting for the winner's row lock, matches nothing), and then
enqueues the period's job in the same transaction. The job's request_id names the
period, so even a period fired twice (a schedule deleted and created again) is one
job. On PostgreSQL "now" is the database's clock (clock_timestamp()), so instances
whose clocks disagree still agree on what is due; SQLite has one clock, the store's.

The period's job is enqueued by the job commands (job_commands.SqlJobCommands.enqueue_in,
Enqueue's own INSERT and conflict answer, written once), on the round's connection:
the job and the move of next_fire_at commit together or not at all. The port's
`enqueue` is not used for it: it commits on a connection of its own, so a round could
commit its claim without its job or the job without the claim, and on SQLite it would
wait for the write lock the round's transaction holds (BEGIN IMMEDIATE).

What a round takes (issue 42: one tenant's schedules stopped every other's):
- A period that WAITS for its previous job (a catch-up window, and that job still
  PENDING or PROCESSING) is not due: the round could only wait again. It is taken
  once that job has ended (or is gone), and otherwise looked at again only every
  WAITING_RECHECK (to pass over the periods that fell out of its window); its round
  sets updated_at, which dates that look.
- A round is shared between owners (tenant and requested_by): each owner's due
  schedules are ranked by next_fire_at, and the round takes every owner's first
  before anyone's second, at most PER_OWNER_IN_ROUND of one owner; the firing loop
  starts the next round at once while the last one fired anything.

Whose token owns a schedule (issue 42, point 6: schedules kept firing after their
owner's token was revoked or expired, and a name given a new token inherited them):
- CreateSchedule records owner_token_id, the api_tokens row of the tenant's name
  that is live (at most one is: a unique index), or, if none is, the newest of that
  name (a caller whose token was revoked in the last seconds, still in the
  verifier's cache, creates a schedule that does not fire). A tenant no token has
  ever had (--auth off: tenant ""; a client certificate's name): NULL, no owner
  token, the schedule fires as before.
- A round takes a schedule only while its owner token is NULL or live: not
  revoked, and not past its expires_at by the schedule's clock (the due query, the
  claim and next_schedule_fire_at all ask). A held schedule keeps its row as it
  was; reads show it with `owner_hold` (why), which GetSchedule/ListSchedules
  show as paused with that reason.
- A token made again under the same name is another row (another id): it does
  not own the old token's schedules. ResumeSchedule (by the new token, or an
  operator) takes a held schedule over deliberately: it records the name's live
  token and, as after a pause, counts the periods passed meanwhile as skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, case, delete, exists, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from san_jobs.job_service.domain.errors import DuplicateJobError
from san_jobs.job_service.domain.model import ACTIVE_STATUSES, Job, JobStatus, NewJob, OnDuplicate
from san_jobs.job_service.domain.ports import (
    CreateScheduleParams,
    EnqueueParams,
    FindSchedulesParams,
    FireDueParams,
    ListSchedulesParams,
    ScheduleKey,
)
from san_jobs.job_service.domain.schedules import (
    PER_OWNER_IN_ROUND,
    WAITING_RECHECK,
    FireOutcome,
    NewSchedule,
    Schedule,
    ScheduleExistsError,
    ScheduleQuotaError,
    anchor_of,
    fires,
    job_of_period,
    json_definition,
    next_period,
    owner_hold,
    periods_passed,
    plan_fire,
)
from san_jobs.job_service.storage.connections import Connections
from san_jobs.job_service.storage.job_commands import SqlJobCommands
from san_jobs.job_service.storage.rows import as_utc
from san_jobs.job_service.storage.tables import api_tokens, async_jobs, job_schedules

__all__ = ["FireOutcome", "SqlScheduleStore", "row_to_schedule"]

S = job_schedules.c
T = api_tokens.c

_ACTIVE = sorted(status.value for status in ACTIVE_STATUSES)
# The schedule's previous job, if it still exists (a LEFT JOIN: pruned, or none).
_WITH_PREVIOUS_JOB = job_schedules.outerjoin(async_jobs, async_jobs.c.id == S.last_job_id)


def _not_waiting() -> ColumnElement[bool]:
    """The schedule's due period does not wait for its previous job (over
    _WITH_PREVIOUS_JOB): no catch-up window (an overlap is skipped, which moves it
    on), or the previous job is gone or has ended."""
    catchup = func.coalesce(S.definition["catchup_seconds"].as_float(), 0)
    return or_(
        catchup <= 0,
        async_jobs.c.status.is_(None),
        async_jobs.c.status.not_in(_ACTIVE),
    )


def _owner_live(now: Any) -> ColumnElement[bool]:
    """The schedule's owner token is none, or live at `now` (the module's docstring)."""
    return or_(
        S.owner_token_id.is_(None),
        exists().where(
            T.id == S.owner_token_id,
            T.revoked_at.is_(None),
            or_(T.expires_at.is_(None), T.expires_at > now),
        ),
    )


def _owner_token_of(tenant: str) -> Any:
    """The token that owns what `tenant` creates now: the live one of its name, or
    the newest (the module's docstring); None for tenant "" (no authentication)."""
    if not tenant:
        return None
    return (
        select(T.id)
        .where(T.name == tenant)
        .order_by(T.revoked_at.is_(None).desc(), T.created_at.desc())
        .limit(1)
        .scalar_subquery()
    )


_OWNER = job_schedules.outerjoin(api_tokens, T.id == S.owner_token_id)
# A schedule with its owner token's state (row_to_schedule reads the owner_ columns).
_WITH_OWNER = select(
    job_schedules,
    T.id.label("owner_found"),
    T.revoked_at.label("owner_revoked_at"),
    T.expires_at.label("owner_expires_at"),
).select_from(_OWNER)


def _live_token_of(tenant: str) -> Any:
    """The live token of `tenant`'s name (a unique index: at most one), or NULL."""
    return select(T.id).where(T.name == tenant, T.revoked_at.is_(None)).limit(1).scalar_subquery()


def row_to_schedule(row: Any, now: datetime | None = None) -> Schedule:
    """A schedule row; with `now`, a row of _WITH_OWNER, its owner_hold filled in."""
    next_fire_at, created_at, updated_at = (
        as_utc(row["next_fire_at"]),
        as_utc(row["created_at"]),
        as_utc(row["updated_at"]),
    )
    assert next_fire_at is not None and created_at is not None and updated_at is not None
    owner_token_id = row.get("owner_token_id")
    hold = ""
    if owner_token_id is not None and now is not None:
        hold = owner_hold(
            row["tenant"],
            row["owner_found"] is not None,
            as_utc(row["owner_revoked_at"]),
            as_utc(row["owner_expires_at"]),
            now,
        )
    return Schedule(
        schedule_id=row["schedule_id"],
        definition=json_definition(row["definition"]),
        paused=bool(row["paused"]),
        requested_by=row["requested_by"],
        tenant=row["tenant"],
        next_fire_at=next_fire_at,
        last_fire_at=as_utc(row["last_fire_at"]),
        last_job_id=row["last_job_id"],
        skipped_count=int(row["skipped_count"]),
        created_at=created_at,
        updated_at=updated_at,
        owner_token_id=owner_token_id,
        owner_hold=hold,
    )


def _key(key: ScheduleKey) -> Any:
    return and_(S.tenant == key.tenant, S.schedule_id == key.schedule_id)


class SqlScheduleStore:
    """The schedules' port on `job_schedules`: the store's connections and clock (the
    database's clock on PostgreSQL: _schedule_now), and its job commands, which
    enqueue a period's job in the round's transaction (the module's docstring)."""

    def __init__(
        self, *, db: Connections, commands: SqlJobCommands, now: Callable[[], datetime]
    ) -> None:
        self._db = db
        self._commands = commands
        self._now = now

    async def _schedule_now(self, conn: AsyncConnection) -> datetime:
        """The time schedules are judged by: the database's on PostgreSQL (every
        instance the same), the store's clock on SQLite."""
        if not self._db.pg:
            return self._now()
        moment = (await conn.execute(select(func.clock_timestamp()))).scalar_one()
        value = as_utc(moment)
        assert value is not None
        return value

    def _db_now(self, now: datetime) -> Any:
        """`now` in a WHERE: on PostgreSQL the database's clock at that statement."""
        return func.clock_timestamp() if self._db.pg else now

    async def create_schedule(self, params: CreateScheduleParams) -> tuple[Schedule, bool]:
        """Store the schedule; (the stored one, True when this call created it). The
        same (tenant, schedule_id) with an equal definition is that schedule (a
        retry); with another, ScheduleExistsError. A new one when its tenant has
        `max_per_tenant` already: ScheduleQuotaError (counted under a per-tenant
        lock on PostgreSQL, SQLite's write lock on SQLite: racing creates never
        pass the cap)."""
        new, max_per_tenant = params.schedule, params.max_per_tenant
        insert = postgresql.insert if self._db.pg else sqlite.insert
        async with self._db.tx() as conn:
            now = await self._schedule_now(conn)
            if max_per_tenant is not None:
                await self._check_quota(conn, new, max_per_tenant)
            first = next_period(new.definition, anchor_of(now), now)
            statement = (
                insert(job_schedules)
                .values(
                    tenant=new.tenant,
                    schedule_id=new.schedule_id,
                    requested_by=new.requested_by,
                    definition=new.definition.to_json(),
                    paused=new.paused,
                    next_fire_at=first,
                    last_fire_at=None,
                    last_job_id=None,
                    skipped_count=0,
                    created_at=now,
                    updated_at=now,
                    owner_token_id=_owner_token_of(new.tenant),
                )
                .on_conflict_do_nothing()
                .returning(S.schedule_id)
            )
            created = (await conn.execute(statement)).first() is not None
            stored = await self._one(conn, ScheduleKey(new.tenant, new.schedule_id))
        assert stored is not None  # a row conflicted, and schedules are deleted by key only
        if created:
            return stored, True
        if stored.definition != new.definition:
            raise ScheduleExistsError(new.schedule_id)
        return stored, False

    async def _check_quota(self, conn: AsyncConnection, new: NewSchedule, limit: int) -> None:
        """ScheduleQuotaError when `new` would be a new schedule past its tenant's
        `limit` (a retry of a stored one is not new)."""
        if self._db.pg:
            # Creates of one tenant one at a time (the count below is then exact).
            await conn.execute(
                select(
                    func.pg_advisory_xact_lock(
                        func.hashtextextended("san_jobs.schedules:" + new.tenant, 0)
                    )
                )
            )
        owned = (
            await conn.execute(
                select(
                    func.count(),
                    func.coalesce(func.max(case((S.schedule_id == new.schedule_id, 1))), 0),
                ).where(S.tenant == new.tenant)
            )
        ).one()
        count, exists_already = int(owned[0]), bool(owned[1])
        if count >= limit and not exists_already:
            raise ScheduleQuotaError(new.tenant, limit)

    async def find_schedules(self, params: FindSchedulesParams) -> list[Schedule]:
        """The schedules of this id: the tenant's (at most one), or with None every
        tenant's."""
        query = _WITH_OWNER.where(S.schedule_id == params.schedule_id)
        if params.tenant is not None:
            query = query.where(S.tenant == params.tenant)
        async with self._db.single() as conn:
            rows = (await conn.execute(query.order_by(S.tenant))).mappings().all()
        now = self._now()
        return [row_to_schedule(row, now) for row in rows]

    async def list_schedules(
        self, params: ListSchedulesParams
    ) -> tuple[list[Schedule], tuple[str, str] | None]:
        """A page by (schedule_id, tenant) after `after`; and the last one's key
        when more may follow."""
        tenant, page_size, after = params.tenant, params.page_size, params.after
        query = _WITH_OWNER
        if tenant is not None:
            query = query.where(S.tenant == tenant)
        if after is not None:
            after_id, after_tenant = after
            query = query.where(
                or_(
                    S.schedule_id > after_id,
                    and_(S.schedule_id == after_id, S.tenant > after_tenant),
                )
            )
        query = query.order_by(S.schedule_id, S.tenant).limit(page_size + 1)
        async with self._db.single() as conn:
            rows = (await conn.execute(query)).mappings().all()
        now = self._now()
        page = [row_to_schedule(row, now) for row in rows[:page_size]]
        more = len(rows) > page_size
        return page, (page[-1].schedule_id, page[-1].tenant) if more and page else None

    async def delete_schedule(self, key: ScheduleKey) -> bool:
        async with self._db.single() as conn:
            result = await conn.execute(
                delete(job_schedules).where(_key(key)).returning(S.schedule_id)
            )
            return result.first() is not None

    async def pause_schedule(self, key: ScheduleKey) -> Schedule | None:
        """Paused (a paused one as it is); None: no such schedule. The periods that
        pass while paused are counted as skipped at resume."""
        async with self._db.tx() as conn:
            now = await self._schedule_now(conn)
            await conn.execute(
                update(job_schedules)
                .where(_key(key), S.paused.is_(False))
                .values(paused=True, updated_at=now)
            )
            return await self._one(conn, key)

    async def resume_schedule(self, key: ScheduleKey) -> Schedule | None:
        """Running again from its next period: the periods that started while it
        was paused (or held: its owner token revoked or expired) are skipped and
        counted. A held one is taken over by its tenant's live token, if there is
        one (else it stays held). None: no such schedule."""
        async with self._db.tx() as conn:
            stored = await self._one(conn, key, for_update=True)
            if stored is None or not (stored.paused or stored.held):
                return stored
            now = await self._schedule_now(conn)
            passed, upcoming = periods_passed(
                stored.definition, anchor_of(stored.created_at), stored.next_fire_at, now
            )
            await conn.execute(
                update(job_schedules)
                .where(_key(key))
                .values(
                    paused=False,
                    next_fire_at=upcoming,
                    skipped_count=S.skipped_count + passed,
                    updated_at=now,
                    **({"owner_token_id": _live_token_of(key.tenant)} if stored.held else {}),
                )
            )
            return await self._one(conn, key)

    async def _one(
        self, conn: AsyncConnection, key: ScheduleKey, *, for_update: bool = False
    ) -> Schedule | None:
        query = _WITH_OWNER.where(_key(key))
        if for_update and self._db.pg:
            query = query.with_for_update(of=job_schedules)
        row = (await conn.execute(query)).mappings().first()
        return None if row is None else row_to_schedule(row, self._now())

    async def next_schedule_fire_at(self) -> datetime | None:
        """The earliest next_fire_at of a running schedule that does not wait for
        its previous job and whose owner token is live (None: there is none). A
        waiting one's look again is left to the firing loop's poll."""
        now = self._now()
        async with self._db.single() as conn:
            value = (
                await conn.execute(
                    select(func.min(S.next_fire_at))
                    .select_from(_WITH_PREVIOUS_JOB)
                    .where(S.paused.is_(False), _not_waiting(), _owner_live(self._db_now(now)))
                )
            ).scalar()
        return as_utc(value)

    async def fire_due_schedules(self, params: FireDueParams) -> list[FireOutcome]:
        """One round of each running schedule that is due (at most `limit`, at most
        PER_OWNER_IN_ROUND of one owner, every owner's first before anyone's
        second), each in its own transaction; the rounds another instance won are
        left out. A period waiting for its previous job is not due (the module's
        docstring)."""
        async with self._db.single() as conn:
            now = await self._schedule_now(conn)
            owner_rank = (
                func.row_number()
                .over(
                    partition_by=(S.tenant, S.requested_by),
                    order_by=(S.next_fire_at, S.schedule_id),
                )
                .label("owner_rank")
            )
            due = (
                select(job_schedules, owner_rank)
                .select_from(_WITH_PREVIOUS_JOB)
                .where(
                    S.paused.is_(False),
                    S.next_fire_at <= now,
                    or_(_not_waiting(), S.updated_at <= now - WAITING_RECHECK),
                    _owner_live(now),
                )
                .subquery()
            )
            rows = (
                (
                    await conn.execute(
                        select(due)
                        .where(due.c.owner_rank <= PER_OWNER_IN_ROUND)
                        .order_by(due.c.owner_rank, due.c.next_fire_at)
                        .limit(params.limit)
                    )
                )
                .mappings()
                .all()
            )
        outcomes: list[FireOutcome] = []
        for row in rows:
            outcome = await self._fire_round(row_to_schedule(row))
            if outcome is not None:
                outcomes.append(outcome)
        return outcomes

    async def _fire_round(self, due: Schedule) -> FireOutcome | None:
        key = ScheduleKey(due.tenant, due.schedule_id)
        async with self._db.tx() as conn:
            now = await self._schedule_now(conn)
            plan = plan_fire(due.definition, anchor_of(due.created_at), due.next_fire_at, now)
            waits = ""
            if fires(plan) and due.definition.catchup_window:
                # With a catch-up window, a period whose previous job is still active
                # waits for it (while within the window) instead of being skipped:
                # after downtime, the missed periods then fire one after another (the
                # template's target can hold one active job only).
                waits = await self._overlap(conn, due.last_job_id)
            # The claim of the round: only one instance's UPDATE matches the due value.
            claimed = (
                await conn.execute(
                    update(job_schedules)
                    .where(
                        _key(key),
                        S.next_fire_at == due.next_fire_at,
                        S.next_fire_at <= self._db_now(now),
                        S.paused.is_(False),
                        _owner_live(self._db_now(now)),
                    )
                    .values(
                        # Waiting: only the periods already too old are passed over.
                        next_fire_at=plan.fire if waits else plan.next_fire_at,
                        skipped_count=S.skipped_count + plan.skipped,
                        updated_at=now,
                    )
                    .returning(S.last_job_id)
                )
            ).first()
            if claimed is None:
                return None  # another instance won it, or it was paused or deleted
            if waits:
                return FireOutcome(due, plan.fire, None, False, plan.skipped, waits, waiting=True)
            if not fires(plan):
                return FireOutcome(due, None, None, False, plan.skipped, "older than catch-up")
            reason = await self._overlap(conn, claimed[0])
            job: Job | None = None
            deduplicated = False
            if not reason:
                job, deduplicated, reason = await self._enqueue_period(
                    conn, job_of_period(due, plan.fire)
                )
            if job is None:
                await conn.execute(
                    update(job_schedules).where(_key(key)).values(skipped_count=S.skipped_count + 1)
                )
                return FireOutcome(due, plan.fire, None, False, plan.skipped + 1, reason)
            await conn.execute(
                update(job_schedules)
                .where(_key(key))
                .values(last_fire_at=plan.fire, last_job_id=job.id)
            )
        return FireOutcome(due, plan.fire, job, deduplicated, plan.skipped)

    async def _overlap(self, conn: AsyncConnection, last_job_id: str | None) -> str:
        """Why the period must be skipped: its previous job is still active ("" if not)."""
        if last_job_id is None:
            return ""
        status = (
            await conn.execute(select(async_jobs.c.status).where(async_jobs.c.id == last_job_id))
        ).scalar()
        if status is not None and JobStatus(status) in ACTIVE_STATUSES:
            return f"the previous period's job {last_job_id} is still {status}"
        return ""

    async def _enqueue_period(
        self, conn: AsyncConnection, new: NewJob
    ) -> tuple[Job | None, bool, str]:
        """The period's job, enqueued in the round's transaction by the job commands,
        as any Enqueue is: (job, deduplicated, "") or, when the target already has an
        active job of another origin, (None, False, why)."""
        try:
            job, deduplicated = await self._commands.enqueue_in(
                conn, EnqueueParams(job=new, on_duplicate=OnDuplicate.REJECT)
            )
        except DuplicateJobError as held:
            holder = held.existing_job_id
            return None, False, f"the target has an active job {holder} (not this schedule's)"
        return job, deduplicated, ""
