"""Schedules: a job made from a template once per period (cron or a fixed interval).

This module holds what a schedule is and every rule about its periods, with no I/O:
validation of the parts that are not the template (the template is checked by
Enqueue's own rules, transport/requests.py), the period arithmetic (cron through
cronsim, read in the schedule's IANA time zone; intervals anchored at the creation
second), the request_id of a period's job, and the plan of one firing round (which
due periods are skipped, which one fires, where the schedule goes next).

Daylight-saving changes follow Debian cron, as cronsim does: a wall-clock time the
clock jumps over fires once, at the jump; a time it repeats fires once, the first
time (schedules whose hour field is `*` fire in both repeated hours, as cron's do).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from san_jobs.job_service.domain.errors import (
    FieldViolation,
    JobServiceError,
    QuotaExceededError,
)
from san_jobs.job_service.domain.model import Job, JobType, JsonDict, NewJob, OnDuplicate

MAX_SCHEDULE_ID_CHARS = 128
# A template's serialized size (issue 42, point 4): a schedule is read whole by every
# firing round and every ListSchedules page; the jobs it makes are small requests.
MAX_TEMPLATE_BYTES = 64 * 1024
MAX_CRON_CHARS = 256
MAX_TIME_ZONE_CHARS = 64
MIN_INTERVAL = timedelta(seconds=1)
MAX_INTERVAL = timedelta(days=366)
MAX_CATCHUP_WINDOW = timedelta(days=366)
# A firing round counts skipped periods one by one for cron (there is no closed
# form); past this many it stops counting and jumps: the count is then a lower
# bound (after an outage of a week for a per-minute schedule). Bounded because the
# count runs on the event loop, inside the round's transaction: 10,000 cronsim
# steps take about 0.1 s.
MAX_COUNTED_PERIODS = 10_000
# next_period's bound on cronsim's matches that fall before `after` (a repeated
# hour gives one; the bound only stops a loop that cannot happen).
_DST_STEPS = 4
# cronsim gives up a search for the next match after this many years (check_cron).
CRON_SEARCH_YEARS = 50

# The firing round (storage/schedules.py says how; issue 42): a period that waits for
# its previous job is not due, but is looked at again this often (to pass over the
# periods that fell out of its catch-up window); and a round takes at most this many
# of one owner's due schedules, every owner's first before anyone's second.
WAITING_RECHECK = timedelta(seconds=60)
PER_OWNER_IN_ROUND = 10

_SCHEDULE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")

# The request ids of the periods' jobs begin with this; it is JobService's own: a
# caller's request_id that begins with it is refused (domain/validation.py), so that
# no one can make a period's job in advance (issue 42: a job delayed for months under
# a period's id made the schedule wait for it, period after period).
PERIOD_REQUEST_ID_PREFIX = "schedule:"


class ScheduleNotFoundError(JobServiceError):
    """The caller has no schedule of this id (another caller's is not found either)."""

    def __init__(self, schedule_id: str) -> None:
        self.schedule_id = schedule_id
        super().__init__(f"schedule {schedule_id} not found")


class ScheduleQuotaError(QuotaExceededError):
    """CreateSchedule of a new schedule by a tenant that has `limit` already
    (--max-schedules-per-caller; issue 42: nothing bounded a tenant's schedules)."""

    CAP = "max-schedules-per-caller"

    def __init__(self, tenant: str, limit: int) -> None:
        super().__init__(
            self.CAP,
            limit,
            tenant,
            f"{tenant or 'the caller'} has {limit} schedules, the most one caller may have"
            f" (--{self.CAP}); delete one first",
        )


class ScheduleExistsError(JobServiceError):
    """CreateSchedule with an id the caller uses for a schedule of another definition."""

    def __init__(self, schedule_id: str) -> None:
        self.schedule_id = schedule_id
        super().__init__(
            f"schedule {schedule_id} exists with another definition;"
            " delete it first or choose another schedule_id"
        )


@dataclass(frozen=True, slots=True)
class ScheduleTemplate:
    """The job each period enqueues, as Enqueue validated it (defaults resolved)."""

    job_type: JobType
    target_id: str
    request_params: JsonDict
    max_attempts: int
    priority: int
    on_duplicate: OnDuplicate

    def to_json(self) -> JsonDict:
        return {
            "job_type": self.job_type.value,
            "target_id": self.target_id,
            "request_params": self.request_params,
            "max_attempts": self.max_attempts,
            "priority": self.priority,
            "on_duplicate": self.on_duplicate.value,
        }

    @classmethod
    def from_json(cls, data: JsonDict) -> ScheduleTemplate:
        return cls(
            job_type=JobType(data["job_type"]),
            target_id=str(data["target_id"]),
            request_params=dict(data["request_params"]),
            max_attempts=int(data["max_attempts"]),
            priority=int(data["priority"]),
            on_duplicate=OnDuplicate(data["on_duplicate"]),
        )


@dataclass(frozen=True, slots=True)
class ScheduleDefinition:
    """What the caller chose: when (cron + time_zone, or interval), what (template),
    how far back missed periods are fired. Two CreateSchedule calls with equal
    definitions are the same schedule (a retry)."""

    template: ScheduleTemplate
    cron: str | None = None
    time_zone: str = ""  # "" = UTC; only with cron
    interval: timedelta | None = None
    catchup_window: timedelta = timedelta(0)

    def to_json(self) -> JsonDict:
        return {
            "template": self.template.to_json(),
            "cron": self.cron,
            "time_zone": self.time_zone,
            "interval_seconds": None if self.interval is None else self.interval.total_seconds(),
            "catchup_seconds": self.catchup_window.total_seconds(),
        }

    @classmethod
    def from_json(cls, data: JsonDict) -> ScheduleDefinition:
        interval = data.get("interval_seconds")
        return cls(
            template=ScheduleTemplate.from_json(data["template"]),
            cron=data.get("cron"),
            time_zone=str(data.get("time_zone") or ""),
            interval=None if interval is None else timedelta(seconds=float(interval)),
            catchup_window=timedelta(seconds=float(data.get("catchup_seconds") or 0)),
        )


@dataclass(frozen=True, slots=True)
class NewSchedule:
    """CreateSchedule's request after validation; the owner set by the caller."""

    schedule_id: str
    definition: ScheduleDefinition
    paused: bool
    requested_by: str
    tenant: str = ""


@dataclass(frozen=True, slots=True)
class Schedule:
    """A stored schedule."""

    schedule_id: str
    definition: ScheduleDefinition
    paused: bool
    requested_by: str
    tenant: str
    next_fire_at: datetime
    last_fire_at: datetime | None
    last_job_id: str | None
    skipped_count: int
    created_at: datetime
    updated_at: datetime
    # The token that owns it (api_tokens.id; storage/schedules.py says how it is
    # chosen): None when no token does (--auth off, a client certificate).
    owner_token_id: str | None = None
    # Why it does not fire although not paused: its owner's token is revoked or
    # expired ("" when it is live, or there is none). Read, never stored.
    owner_hold: str = ""

    @property
    def held(self) -> bool:
        return bool(self.owner_hold)


def owner_hold(
    token_name: str,
    found: bool,
    revoked_at: datetime | None,
    expires_at: datetime | None,
    now: datetime,
) -> str:
    """Why a schedule owned by this token does not fire ("" when the token is live):
    a revoked or expired owner's schedules are paused (issue 42), and a token made
    again under the same name is another token, which does not own them."""
    resume = f"ResumeSchedule with a live token named {token_name!r} takes it over"
    if not found:
        return f"its owner's token no longer exists; {resume}"
    if revoked_at is not None:
        return f"its owner's token {token_name!r} was revoked at {rfc3339(revoked_at)}; {resume}"
    if expires_at is not None and now >= expires_at:
        return f"its owner's token {token_name!r} expired at {rfc3339(expires_at)}; {resume}"
    return ""


@dataclass(frozen=True, slots=True)
class FireOutcome:
    """What one round of a due schedule did (only the instance that won it sees one).
    `job`: the period's job (None: the period was skipped, or waits); `deduplicated`: that job
    already existed (its period was fired before); `skipped`: periods skipped in this
    round; `reason`: why the fired period has no job, if it has none."""

    schedule: Schedule
    period: datetime | None
    job: Job | None
    deduplicated: bool
    skipped: int
    reason: str = ""
    # The period waits for its previous job (catch-up window): no job yet, not skipped.
    waiting: bool = False


def check_schedule_id(field: str, value: str, out: list[FieldViolation]) -> None:
    if not value:
        out.append(FieldViolation(field, "is required"))
    elif len(value) > MAX_SCHEDULE_ID_CHARS:
        out.append(FieldViolation(field, f"at most {MAX_SCHEDULE_ID_CHARS} characters"))
    elif _SCHEDULE_ID.fullmatch(value) is None:
        out.append(FieldViolation(field, "only letters, digits, '.', '_', '-' and ':' are allowed"))


def check_cron(field: str, cron: str, out: list[FieldViolation]) -> bool:
    """A five-field crontab expression cronsim accepts (no @reboot, no seconds)."""
    if len(cron) > MAX_CRON_CHARS:
        out.append(FieldViolation(field, f"at most {MAX_CRON_CHARS} characters"))
        return False
    if not cron.isascii() or len(cron.split()) != 5:
        out.append(
            FieldViolation(field, "must be five fields: minute hour day-of-month month day-of-week")
        )
        return False
    try:
        periods = CronSim(cron, datetime(2026, 1, 1, tzinfo=UTC))
    except (CronSimError, ValueError) as error:
        out.append(FieldViolation(field, f"not a crontab expression: {error}"))
        return False
    try:
        # Its first period: a cron that never matches ("0 0 */8 * MON#5": the 5th
        # Monday on a 1st, 9th, 17th or 25th) is refused here, not met as INTERNAL
        # ("coroutine raised StopIteration") when its schedule is stored (issue 42).
        # The search is bounded by cronsim: CRON_SEARCH_YEARS years, a month at a time
        # (about 10 ms); a cron that matches at all matches at least every 40 years
        # or so (Feb 29 on a given weekday), so none that can fire is refused.
        next(periods)
    except StopIteration:
        out.append(
            FieldViolation(field, f"never matches: no period in the next {CRON_SEARCH_YEARS} years")
        )
        return False
    return True


def time_zone(field: str, name: str, out: list[FieldViolation]) -> ZoneInfo | None:
    """The IANA zone named `name` ("" is UTC), or a violation on `field`."""
    if not name:
        return ZoneInfo("UTC")
    if len(name) > MAX_TIME_ZONE_CHARS or not name.isascii() or name.startswith("/"):
        out.append(FieldViolation(field, "not an IANA time zone name (e.g. Europe/Paris)"))
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        out.append(FieldViolation(field, f"unknown time zone {name[:64]!r} (an IANA name)"))
        return None


def check_interval(field: str, interval: timedelta, out: list[FieldViolation]) -> None:
    # Whole seconds: a period's start is its job's request_id, written to the second.
    if interval < MIN_INTERVAL or interval > MAX_INTERVAL:
        out.append(FieldViolation(field, "must be at least 1 s and at most 366 days"))
    elif interval.microseconds:
        out.append(FieldViolation(field, "must be a whole number of seconds"))


def check_catchup(field: str, window: timedelta, out: list[FieldViolation]) -> None:
    if window < timedelta(0) or window > MAX_CATCHUP_WINDOW:
        out.append(FieldViolation(field, "must be between 0 and 366 days"))


# -- periods -------------------------------------------------------------------------


def anchor_of(created_at: datetime) -> datetime:
    """An interval schedule's periods start at anchor + k * interval, k >= 1: the
    creation time cut to the second (request ids are written to the second)."""
    return created_at.astimezone(UTC).replace(microsecond=0)


def next_period(definition: ScheduleDefinition, anchor: datetime, after: datetime) -> datetime:
    """The start (UTC) of the first period strictly after `after`."""
    after = after.astimezone(UTC)
    if definition.interval is not None:
        step = definition.interval
        if after < anchor + step:
            return anchor + step
        k = (after - anchor) // step + 1
        return anchor + k * step
    assert definition.cron is not None
    zone = ZoneInfo(definition.time_zone or "UTC")
    # cronsim returns the first match strictly after its start in WALL-CLOCK time, in
    # the start's zone (fold set for a repeated hour), which astimezone turns into
    # the instant. From the second pass of a repeated hour that match may be the
    # first pass's, an instant before `after` (issue 42: `30 1 * * *` in
    # America/New_York after 06:10 UTC on 2026-11-01, 01:10 EST, gave 05:30 UTC,
    # 01:30 EDT): the next match is taken then. Wall-clock time only moves on, so
    # the second is after `after` (a repeated hour is passed over at most once).
    start = after.astimezone(zone)
    matches = CronSim(definition.cron, start)
    for _ in range(_DST_STEPS):
        moment: datetime = next(matches).astimezone(UTC)
        if moment > after:
            return moment
    raise AssertionError(f"no period of {definition.cron!r} after {after} in {_DST_STEPS} steps")


def period_request_id(schedule_id: str, period_start: datetime) -> str:
    """The request_id of the job of a period: fired twice, it is the same job."""
    return f"{PERIOD_REQUEST_ID_PREFIX}{schedule_id}:{rfc3339(period_start)}"


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class FirePlan:
    """One firing round of a due schedule at `now`: `skipped` periods before the one
    that fires are skipped (older than the catch-up window); `fire` is the period
    whose job is enqueued now; `next_fire_at` where the schedule goes after it."""

    skipped: int
    fire: datetime
    next_fire_at: datetime


def plan_fire(
    definition: ScheduleDefinition, anchor: datetime, due: datetime, now: datetime
) -> FirePlan:
    """The round for a schedule whose next period starts at `due` <= `now`.

    Missed periods are fired if they started within catchup_window of now, the
    oldest first, one per round (the next round, at once, takes the next; its
    previous job is then likely still active, so it is skipped as an overlap unless
    that job was quick); older ones are skipped. A zero window fires only the latest
    period that has started (the proto: "only the latest missed period is fired if
    it is within one period of now", which the latest started period always is)."""
    window = definition.catchup_window
    if window > timedelta(0):
        skipped, _, first = _count_periods(definition, anchor, due, now - window, inclusive=False)
        if first > now:  # every missed period is older than the window: none fires
            return FirePlan(skipped, first, first)
        return FirePlan(skipped, first, next_period(definition, anchor, first))
    counted, latest, after_now = _count_periods(definition, anchor, due, now, inclusive=True)
    assert latest is not None  # due <= now: at least `due` is counted
    return FirePlan(counted - 1, latest, after_now)


def fires(plan: FirePlan) -> bool:
    """False when the round only skips (every missed period was too old)."""
    return plan.fire != plan.next_fire_at


def periods_passed(
    definition: ScheduleDefinition, anchor: datetime, due: datetime, now: datetime
) -> tuple[int, datetime]:
    """The periods from `due` that started at or before `now` (skipped: passed while
    paused), and the first one after now (where ResumeSchedule puts the schedule)."""
    if due > now:
        return 0, due
    counted, _, after = _count_periods(definition, anchor, due, now, inclusive=True)
    return counted, after


def _count_periods(
    definition: ScheduleDefinition,
    anchor: datetime,
    due: datetime,
    limit: datetime,
    *,
    inclusive: bool,
) -> tuple[int, datetime | None, datetime]:
    """The periods from `due` on that start before `limit` (inclusive: at or before):
    how many, the last of them (None: none), and the first period after them."""
    if definition.interval is not None:
        step = definition.interval
        if due > limit or (due == limit and not inclusive):
            return 0, None, due
        span = limit - due
        whole, rest = divmod(span, step)
        n = whole + 1 if (rest or inclusive) else whole
        return n, due + (n - 1) * step, due + n * step
    count, last, moment = 0, None, due
    while moment < limit or (inclusive and moment == limit):
        if count >= MAX_COUNTED_PERIODS:
            # Stop counting (the count is then a lower bound): jump past the limit,
            # and take the last period before it by cronsim's reverse iteration
            # (only after a long outage: see MAX_COUNTED_PERIODS).
            moment = next_period(definition, anchor, limit if inclusive else _before(limit))
            last = _latest_before(definition, moment)
            break
        count, last = count + 1, moment
        moment = next_period(definition, anchor, moment)
    return count, last, moment


def _latest_before(definition: ScheduleDefinition, moment: datetime) -> datetime:
    """The cron period that starts last before `moment` (UTC)."""
    assert definition.cron is not None
    zone = ZoneInfo(definition.time_zone or "UTC")
    start = moment.astimezone(zone)
    found: datetime = next(iter(CronSim(definition.cron, start, reverse=True))).astimezone(UTC)
    # Backwards in wall-clock time from the second pass of a repeated hour, cronsim
    # may pass over a period of its first pass: the periods after it (forwards,
    # as next_period counts them) are looked at too.
    for _ in range(_DST_STEPS):
        later = next_period(definition, found, found)
        if later >= moment:
            break
        found = later
    return found


def _before(moment: datetime) -> datetime:
    return moment - timedelta(microseconds=1)


def job_of_period(schedule: Schedule, period_start: datetime) -> NewJob:
    """The job a period enqueues: the template's, as its owner's, keyed by the period."""
    template = schedule.definition.template
    return NewJob(
        job_type=template.job_type,
        target_id=template.target_id,
        request_params=template.request_params,
        requested_by=schedule.requested_by,
        request_id=period_request_id(schedule.schedule_id, period_start),
        max_attempts=template.max_attempts,
        tenant=schedule.tenant,
        priority=template.priority,
    )


def json_definition(value: Any) -> ScheduleDefinition:
    """The stored definition column (JSON text on SQLite, an object on PostgreSQL)."""
    return ScheduleDefinition.from_json(json.loads(value) if isinstance(value, str) else value)
