"""The days' HTTP API (the days themselves are :mod:`san_jobs.web._days`):

- ``GET /api/days``: the caller's days newest first (their note, their numbers of
  questions and scraps, how far they are), the open day first while it has scraps;
  ``pageSize`` (30, at most 100) and ``pageToken`` (the previous page's
  ``nextPageToken``; "" after the last page); the caller's time zone and end of day.
- ``GET /api/days/{day}``: one day (``YYYY-MM-DD``): its note, its questions (each
  with the scrap it came from), the scraps saved in it. 404 for a day with neither,
  422 naming ``day`` for one that is no date (also for generate).
- ``POST /api/days/{day}/generate``: make the day now (again, if it was made): 202
  with the note's and the questions' job ids; 409 while they are still being made,
  404 for a day without scraps, 422 for a day that has not begun, 429 once it was
  made MAX_GENERATIONS (10) times.
- ``GET /api/me`` / ``PUT /api/me`` ``{"timeZone": "Europe/Paris"}`` (``null``: san-web's
  default): the caller's time zone, where their days end; ``GET``/``PUT
  /api/me/settings`` ``{"timeZone", "tilAt": "HH:MM"}`` (either or both; ``null``:
  san-web's --time-zone or --til-at): their zone and end of day. Under ``--auth off``
  there is one shared space, whose are san-web's own: PUT is 409 there.

Another user's day is never shown: every query is by the caller's name.
"""

from __future__ import annotations

from datetime import date

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from san_jobs.web._auth import current_user
from san_jobs.web._body_guard import json_object
from san_jobs.web._days import (
    DAYS_PAGE_SIZE,
    FIRST_DAY,
    LAST_DAY,
    MAX_DAYS_PAGE_SIZE,
    DayBusy,
    DayProblem,
    Days,
    MadeTooOften,
    NoSuchDay,
    parse_day,
    parse_til_at,
    time_zone,
)
from san_jobs.web._errors import bad_parameter, error_response, invalid


def _days(request: Request) -> Days:
    days: Days = request.app.state.days
    return days


def _day(request: Request) -> date | JSONResponse:
    found = parse_day(request.path_params["day"])
    if found is None:
        return invalid(
            "invalid day", ("day", f"must be a date as YYYY-MM-DD, {FIRST_DAY} to {LAST_DAY}")
        )
    return found


async def _settings_view(request: Request) -> dict[str, str | None]:
    days = _days(request)
    calendar = await days.calendar(current_user(request))
    return {
        "user": current_user(request),
        "timeZone": calendar.zone.key,
        "tilAt": calendar.til_at.isoformat(
            timespec="seconds" if calendar.til_at.second else "minutes"
        ),
    }


async def list_days(request: Request) -> Response:
    raw_size = request.query_params.get("pageSize", "")
    size = DAYS_PAGE_SIZE
    if raw_size:
        if not raw_size.isascii() or not raw_size.isdigit() or len(raw_size) > 3:
            size = 0
        else:
            size = int(raw_size)
        if not 1 <= size <= MAX_DAYS_PAGE_SIZE:
            return bad_parameter(
                "pageSize", f"must be a whole number from 1 to {MAX_DAYS_PAGE_SIZE}"
            )
    raw_token = request.query_params.get("pageToken", "")
    before = None
    if raw_token:
        before = parse_day(raw_token)
        if before is None:
            return bad_parameter("pageToken", "is not a token this API gave")
    found, next_token = await _days(request).list_days(current_user(request), size, before)
    return JSONResponse(
        {"days": found, "nextPageToken": next_token, **await _settings_view(request)}
    )


async def get_day(request: Request) -> Response:
    day = _day(request)
    if isinstance(day, JSONResponse):
        return day
    found = await _days(request).day(current_user(request), day)
    if found is None:
        return error_response(404, "NOT_FOUND", f"no scraps were saved on {day.isoformat()}")
    return JSONResponse(found)


async def generate_day(request: Request) -> Response:
    day = _day(request)
    if isinstance(day, JSONResponse):
        return day
    try:
        note_job, questions_job = await _days(request).generate(current_user(request), day)
    except DayBusy as busy:
        return error_response(409, "FAILED_PRECONDITION", str(busy))
    except MadeTooOften as often:
        return error_response(429, "RESOURCE_EXHAUSTED", str(often))
    except NoSuchDay as missing:
        return error_response(404, "NOT_FOUND", str(missing))
    except DayProblem as problem:
        return invalid(str(problem), ("day", str(problem)))
    body = {"day": day.isoformat(), "noteJobId": note_job, "questionsJobId": questions_job}
    return JSONResponse(body, status_code=202)


async def get_me(request: Request) -> Response:
    return JSONResponse(await _settings_view(request))


async def put_me(request: Request) -> Response:
    """PUT /api/me: ``{"timeZone"}`` (required)."""
    return await _put_settings(request, required="timeZone")


async def put_settings(request: Request) -> Response:
    """PUT /api/me/settings: ``{"timeZone", "tilAt"}``, either or both."""
    return await _put_settings(request, required=None)


async def _put_settings(request: Request, *, required: str | None) -> Response:
    user = current_user(request)
    if user is None:
        return error_response(
            409,
            "FAILED_PRECONDITION",
            "without logins the one shared space uses san-web's --time-zone and --til-at",
        )
    body = await json_object(request)
    if isinstance(body, JSONResponse):
        return body
    if required is not None and required not in body:
        return invalid("the body must be a JSON object", (required, "is required"))
    if not {"timeZone", "tilAt"} & set(body):
        return invalid("nothing to change", ("timeZone", "or tilAt is required"))
    problems: list[tuple[str, str]] = []
    for field, check in (("timeZone", time_zone), ("tilAt", parse_til_at)):
        value = body.get(field)
        if value is None:
            continue
        if not isinstance(value, str):
            problems.append((field, "must be a string or null"))
            continue
        try:
            check(value)
        except ValueError as error:
            problems.append((field, str(error)))
    if problems:
        return invalid("invalid settings", *problems)
    days = _days(request)
    if "timeZone" in body:
        await days.set_time_zone(user, body["timeZone"])
    if "tilAt" in body:
        await days.set_til_at(user, body["tilAt"])
    return JSONResponse(await _settings_view(request))


def day_routes() -> list[Route]:
    return [
        Route("/api/days", list_days, methods=["GET"]),
        Route("/api/days/{day}", get_day, methods=["GET"]),
        Route("/api/days/{day}/generate", generate_day, methods=["POST"]),
        Route("/api/me", get_me, methods=["GET"]),
        Route("/api/me", put_me, methods=["PUT"]),
        Route("/api/me/settings", get_me, methods=["GET"]),
        Route("/api/me/settings", put_settings, methods=["PUT"]),
    ]
