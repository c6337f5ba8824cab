"""The six schedule RPCs: decode, call the application (schedule_app.py: whose a
schedule is, how many one may have), encode.

The template is checked by Enqueue's own decoding (requests.enqueue), its
violations renamed `schedule.template.<field>`: one rule set for a job, wherever it
comes from. As for Enqueue, under --auth token the caller's name is the schedule's
tenant and owner, whatever the template says, and the template's priority obeys
--submitter-most-urgent-priority. A schedule whose owner's token is revoked or
expired is shown paused, `paused_reason` saying why (storage/schedules.py holds its
firing). A ListSchedules page is cut to the send limit by bytes.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from datetime import timedelta

from google.protobuf.duration_pb2 import Duration

from san_jobs.job_service.auth.roles import Role, current_caller
from san_jobs.job_service.domain.errors import FieldViolation, InvalidRequestError
from san_jobs.job_service.domain.job_types import JOB_TYPES
from san_jobs.job_service.domain.limits import (
    DEFAULT_MAX_MESSAGE_BYTES,
    LIST_PAGE_HEADROOM_BYTES,
    MAX_PAGE_TOKEN_CHARS,
)
from san_jobs.job_service.domain.model import OnDuplicate
from san_jobs.job_service.domain.priorities import UrgentPriorities
from san_jobs.job_service.domain.schedules import (
    MAX_CATCHUP_WINDOW,
    MAX_INTERVAL,
    MAX_TEMPLATE_BYTES,
    NewSchedule,
    Schedule,
    ScheduleDefinition,
    ScheduleTemplate,
    check_catchup,
    check_cron,
    check_interval,
    check_schedule_id,
    time_zone,
)
from san_jobs.job_service.domain.validation import EnqueueLimits
from san_jobs.job_service.schedule_app import ScheduleApplication, ScheduleCaller
from san_jobs.job_service.transport import requests
from san_jobs.job_service.transport.convert import JOB_TYPE_TO_PB, message_from_dict, timestamp
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
_TEMPLATE = "schedule.template"
_ON_DUPLICATE_TO_PB = {
    OnDuplicate.REJECT: pb.ON_DUPLICATE_REJECT,
    OnDuplicate.RETURN_EXISTING: pb.ON_DUPLICATE_RETURN_EXISTING,
}


def _duration(
    field: str, value: Duration, largest: timedelta, out: list[FieldViolation]
) -> timedelta | None:
    """A Duration within 0..`largest`, checked on its raw numbers (a hostile one
    must not overflow timedelta)."""
    seconds, nanos = value.seconds, value.nanos
    if not -999_999_999 <= nanos <= 999_999_999 or (
        seconds and nanos and (seconds < 0) != (nanos < 0)
    ):
        out.append(FieldViolation(field, "not a valid Duration"))
        return None
    if seconds < 0 or nanos < 0 or seconds > largest.total_seconds():
        out.append(FieldViolation(field, f"must be between 0 and {largest.days} days"))
        return None
    return timedelta(seconds=seconds, microseconds=nanos // 1000)


def decode_create(
    request: pb.CreateScheduleRequest, limits: EnqueueLimits, default_max_attempts: int
) -> NewSchedule:
    """CreateSchedule's schedule, every bad field named at once; the owner is the
    template's requested_by until the servicer sets the caller's."""
    out: list[FieldViolation] = []
    given = request.schedule
    check_schedule_id("schedule.schedule_id", given.schedule_id, out)
    period = given.WhichOneof("period")
    cron: str | None = None
    interval: timedelta | None = None
    if period is None:
        out.append(FieldViolation("schedule.cron", "give exactly one of cron or interval"))
    elif period == "cron":
        cron = given.cron
        if not check_cron("schedule.cron", cron, out):
            cron = None
        time_zone("schedule.time_zone", given.time_zone, out)
    else:
        interval = _duration("schedule.interval", given.interval, MAX_INTERVAL, out)
        if interval is not None:
            check_interval("schedule.interval", interval, out)
        if given.time_zone:
            out.append(FieldViolation("schedule.time_zone", "only with cron"))
    catchup = timedelta(0)
    if given.HasField("catchup_window"):
        window = _duration("schedule.catchup_window", given.catchup_window, MAX_CATCHUP_WINDOW, out)
        if window is not None:
            check_catchup("schedule.catchup_window", window, out)
            catchup = window
    if given.template.ByteSize() > MAX_TEMPLATE_BYTES:
        out.append(
            FieldViolation(
                "schedule.template",
                f"is {given.template.ByteSize():,} bytes; at most {MAX_TEMPLATE_BYTES:,}",
            )
        )
    template, requested_by = _template(given, limits, default_max_attempts, out)
    if out:
        raise InvalidRequestError(out)
    assert template is not None
    definition = ScheduleDefinition(
        template=template,
        cron=cron,
        time_zone=given.time_zone if cron is not None else "",
        interval=interval,
        catchup_window=catchup,
    )
    return NewSchedule(
        schedule_id=given.schedule_id,
        definition=definition,
        paused=given.paused,
        requested_by=requested_by,
    )


TEMPLATE_DEPENDS_ON = (
    "must be empty: a schedule's periods cannot wait for other jobs (enqueue the"
    " dependent job yourself, with depends_on, once they exist)"
)


def _template(
    given: pb.Schedule, limits: EnqueueLimits, default_max_attempts: int, out: list[FieldViolation]
) -> tuple[ScheduleTemplate | None, str]:
    """The template as Enqueue checks a request, and its requested_by."""
    template: ScheduleTemplate | None = None
    requested_by = ""
    if not given.HasField("template"):
        out.append(FieldViolation(_TEMPLATE, "is required"))
    else:
        if given.template.request_id:
            out.append(
                FieldViolation(f"{_TEMPLATE}.request_id", "must be empty: the schedule sets it")
            )
        if given.template.HasField("schedule_time"):
            out.append(
                FieldViolation(f"{_TEMPLATE}.schedule_time", "must be unset: periods set the time")
            )
        if given.template.depends_on:
            # Issue 42: it was dropped, silently (a TIL template with no notes but a
            # depends_on was accepted, and every period's job then failed).
            out.append(FieldViolation(f"{_TEMPLATE}.depends_on", TEMPLATE_DEPENDS_ON))
        # Enqueue's rules, field names under schedule.template (request_id,
        # schedule_time and depends_on taken as unset: reported above, not twice).
        try:
            decoded = requests.enqueue(
                given.template, limits, default_max_attempts, as_template=True
            )
        except InvalidRequestError as error:
            out += [
                FieldViolation(f"{_TEMPLATE}.{v.field}", v.description) for v in error.violations
            ]
        else:
            new = decoded.job
            template = ScheduleTemplate(
                job_type=new.job_type,
                target_id=new.target_id,
                request_params=new.request_params,
                max_attempts=new.max_attempts,
                priority=new.priority,
                on_duplicate=decoded.on_duplicate,
            )
            requested_by = new.requested_by
    return template, requested_by


def schedule_to_pb(schedule: Schedule) -> pb.Schedule:
    definition = schedule.definition
    template = definition.template
    input_field = JOB_TYPES[template.job_type].input_field
    input_type = type(getattr(pb.EnqueueRequest(), input_field))
    message = pb.Schedule(
        schedule_id=schedule.schedule_id,
        time_zone=definition.time_zone,
        template=pb.EnqueueRequest(
            job_type=JOB_TYPE_TO_PB[template.job_type],
            target_id=template.target_id,
            requested_by=schedule.requested_by,
            max_attempts=template.max_attempts,
            on_duplicate=_ON_DUPLICATE_TO_PB[template.on_duplicate],
            priority=template.priority,
            **{input_field: message_from_dict(input_type, template.request_params)},
        ),
        # Held (its owner token revoked or expired) is paused to whoever reads it.
        paused=schedule.paused or schedule.held,
        paused_reason=schedule.owner_hold,
        next_fire_time=timestamp(schedule.next_fire_at),
        last_fire_time=timestamp(schedule.last_fire_at),
        last_job_id=schedule.last_job_id or "",
        skipped_count=schedule.skipped_count,
        create_time=timestamp(schedule.created_at),
        requested_by=schedule.requested_by,
    )
    if definition.cron is not None:
        message.cron = definition.cron
    elif definition.interval is not None:
        message.interval.FromTimedelta(definition.interval)
    if definition.catchup_window:
        message.catchup_window.FromTimedelta(definition.catchup_window)
    return message


def _page_token(token: str) -> tuple[str, str] | None:
    if not token:
        return None
    bad = InvalidRequestError(
        [FieldViolation("page_token", "malformed page token; pass one from a previous page")]
    )
    if len(token) > MAX_PAGE_TOKEN_CHARS or not token.isascii():
        raise bad
    try:
        value = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (ValueError, binascii.Error, RecursionError):
        raise bad from None
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
        raise bad
    return value[0], value[1]


def _encode_token(after: tuple[str, str]) -> str:
    raw = json.dumps(list(after), separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _caller() -> ScheduleCaller:
    """This call's caller, as the schedule rules see it."""
    caller = current_caller.get()
    if caller is None:
        return ScheduleCaller()
    return ScheduleCaller(tenant=caller.name, own_only=caller.owner is not None, authenticated=True)


def _schedule_id(schedule_id: str) -> str:
    out: list[FieldViolation] = []
    check_schedule_id("schedule_id", schedule_id, out)
    if out:
        raise InvalidRequestError(out)
    return schedule_id


class ScheduleRpcs:
    """What the servicer's six schedule methods do."""

    def __init__(
        self,
        app: ScheduleApplication,
        limits: EnqueueLimits,
        default_max_attempts: int,
        urgent: UrgentPriorities | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        self._app = app
        # What a ListSchedules page's schedules may take of the send limit.
        self._page_budget_bytes = max_message_bytes - LIST_PAGE_HEADROOM_BYTES
        # Who may use the most urgent priorities: a template's jobs are the caller's
        # too, so the rule Enqueue applies applies to them.
        self._urgent = urgent or UrgentPriorities()
        self._limits = limits
        self._default_max_attempts = default_max_attempts

    async def create(self, request: pb.CreateScheduleRequest) -> pb.CreateScheduleResponse:
        new = decode_create(request, self._limits, self._default_max_attempts)
        caller = current_caller.get()
        if caller is not None:
            # Whose schedule it is, and its jobs', is who authenticated.
            new = dataclasses.replace(new, requested_by=caller.name, tenant=caller.name)
            priority = new.definition.template.priority
            problem = self._urgent.problem(priority, caller.name, caller.role is Role.SUBMITTER)
            if problem is not None:
                raise InvalidRequestError([FieldViolation("schedule.template.priority", problem)])
        stored = await self._app.create(new, _caller())
        return pb.CreateScheduleResponse(schedule=schedule_to_pb(stored))

    async def get(self, request: pb.GetScheduleRequest) -> pb.GetScheduleResponse:
        found = await self._app.get(_schedule_id(request.schedule_id), _caller())
        return pb.GetScheduleResponse(schedule=schedule_to_pb(found))

    async def list(self, request: pb.ListSchedulesRequest) -> pb.ListSchedulesResponse:
        if not 0 <= request.page_size <= MAX_PAGE_SIZE:
            raise InvalidRequestError(
                [FieldViolation("page_size", f"must be between 0 and {MAX_PAGE_SIZE}")]
            )
        after = _page_token(request.page_token)
        page, last = await self._app.list(_caller(), request.page_size or DEFAULT_PAGE_SIZE, after)
        # Cut by bytes as ListJobs' pages are (transport/pages.py): 15 templates of
        # 100,000 characters made the default page RESOURCE_EXHAUSTED for everyone.
        messages: list[pb.Schedule] = []
        used = 0
        for index, schedule in enumerate(page):
            message = schedule_to_pb(schedule)
            used += message.ByteSize() + 8  # the field's tag and length, at most
            if messages and used > self._page_budget_bytes:
                cut = page[index - 1]
                last = (cut.schedule_id, cut.tenant)
                break
            messages.append(message)
        return pb.ListSchedulesResponse(
            schedules=messages,
            next_page_token="" if last is None else _encode_token(last),
        )

    async def delete(self, request: pb.DeleteScheduleRequest) -> pb.DeleteScheduleResponse:
        await self._app.delete(_schedule_id(request.schedule_id), _caller())
        return pb.DeleteScheduleResponse()

    async def pause(self, request: pb.PauseScheduleRequest) -> pb.PauseScheduleResponse:
        paused = await self._app.pause(_schedule_id(request.schedule_id), _caller())
        return pb.PauseScheduleResponse(schedule=schedule_to_pb(paused))

    async def resume(self, request: pb.ResumeScheduleRequest) -> pb.ResumeScheduleResponse:
        resumed = await self._app.resume(_schedule_id(request.schedule_id), _caller())
        return pb.ResumeScheduleResponse(schedule=schedule_to_pb(resumed))
