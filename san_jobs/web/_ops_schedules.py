"""``/ops``'s schedules: the list with their fire times, and pause / resume.

- ``GET /api/ops/schedules``: every schedule JobService shows san-web's token (an
  operator token: everyone's), by id, at most :data:`MAX_SHOWN` (``truncated`` says
  when there are more): period, paused (and why, when its owner's token was revoked
  or expired), next and last fire times, last job, periods
  skipped, the job's type and target, whose it is (ListSchedules).
- ``POST /api/ops/schedules/pause`` / ``.../resume`` ``{"scheduleId"}``:
  PauseSchedule / ResumeSchedule (operator only); the schedule as it now is. An
  unknown id is 404 with reason ``SCHEDULE_NOT_FOUND``.

Roles, guards (session, CSRF, same origin, JSON body) and JobService's refusals of
san-web's own token are the other /ops calls' (see :mod:`san_jobs.web._ops_routes`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from san_jobs.client import JobsError
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.shared.display import format_time, job_type_name, period_text
from san_jobs.web._body_guard import json_object
from san_jobs.web._errors import invalid
from san_jobs.web._ops_routes import (
    ACT_ROLES,
    VIEW_ROLES,
    _actor,
    _client,
    _denied,
    _job_service_error,
    _role,
    _text,
    log,
)

MAX_SHOWN = 500
"""The page lists at most this many schedules (more would be a page nobody reads)."""
PAGE_SIZE = 100
MAX_SCHEDULE_ID_CHARS = 128


def schedule_dict(schedule: pb.Schedule) -> dict[str, Any]:
    """A schedule as the page shows it; times RFC 3339 UTC, "-" when unset."""
    return {
        "scheduleId": schedule.schedule_id,
        "period": period_text(schedule),
        "paused": schedule.paused,
        # Why, when no PauseSchedule paused it (its owner's token revoked or expired).
        "pausedReason": schedule.paused_reason,
        # A paused schedule fires at no time; the page shows none.
        "nextFireTime": "-" if schedule.paused else format_time(schedule.next_fire_time),
        "lastFireTime": format_time(schedule.last_fire_time),
        "lastJobId": schedule.last_job_id,
        "skippedCount": schedule.skipped_count,
        "jobType": job_type_name(schedule.template.job_type),
        "targetId": schedule.template.target_id,
        "requestedBy": schedule.requested_by,
    }


async def list_schedules(request: Request) -> Response:
    role = await _role(request)
    if role not in VIEW_ROLES:
        return _denied(role, VIEW_ROLES)
    shown: list[dict[str, Any]] = []
    truncated = False
    try:
        async for schedule in _client(request).iter_schedules(page_size=PAGE_SIZE):
            if len(shown) == MAX_SHOWN:
                truncated = True
                break
            shown.append(schedule_dict(schedule))
    except JobsError as error:
        refused = _job_service_error(error)
        if refused is None:
            raise  # the app's JobsError handler answers it (503, 502, 404, ...)
        return refused
    return JSONResponse({"schedules": shown, "truncated": truncated})


Change = Callable[[str], Awaitable[pb.Schedule]]


async def _change(request: Request, verb: str, change: Callable[[Request], Change]) -> Response:
    role = await _role(request)
    if role not in ACT_ROLES:
        return _denied(role, ACT_ROLES)
    body = await json_object(request)
    if isinstance(body, JSONResponse):
        return body
    out: list[tuple[str, str]] = []
    schedule_id = _text(body.get("scheduleId"), "scheduleId", MAX_SCHEDULE_ID_CHARS, out)
    if not schedule_id and not out:
        out.append(("scheduleId", "is required"))
    if out:
        return invalid(f"invalid {verb} request", *out)
    try:
        schedule = await change(request)(schedule_id)
    except JobsError as error:
        refused = _job_service_error(error)
        if refused is None:
            raise  # the app's JobsError handler answers it (404 SCHEDULE_NOT_FOUND, ...)
        return refused
    log.warning("/ops: %s %sd schedule_id=%s", _actor(request), verb, schedule.schedule_id)
    return JSONResponse(schedule_dict(schedule))


async def pause_schedule(request: Request) -> Response:
    return await _change(request, "pause", lambda r: _client(r).pause_schedule)


async def resume_schedule(request: Request) -> Response:
    return await _change(request, "resume", lambda r: _client(r).resume_schedule)


def schedule_routes() -> list[Route]:
    return [
        Route("/api/ops/schedules", list_schedules),
        Route("/api/ops/schedules/pause", pause_schedule, methods=["POST"]),
        Route("/api/ops/schedules/resume", resume_schedule, methods=["POST"]),
    ]
