"""``/ops``: the operator's page and its JSON API, for users with the ``viewer`` or
``operator`` role (``san-web users create NAME --role ...`` / ``users set-role``).

- ``GET /ops``: the page (static/ops.html); a user without either role gets a plain
  403 "not allowed" page; no session: the login page, as for ``/``.
- ``GET /api/ops/overview``: counts by type and status, the oldest pending job and
  its age, the paused job types (GetJobStats); the caller's name and role.
- ``GET /api/ops/failures?hours=N&jobType=T``: FAILED jobs of the last N hours
  (default 24, at most 744) grouped by code, reason and message start
  (ListFailureGroups).
- ``POST /api/ops/retry-failed`` ``{"jobType", "errorMessageContains",
  "failedWithinHours", "dryRun"}``: RetryFailed (operator only). The page sends a dry
  run first and the real call only once the operator confirms the count.
- ``POST /api/ops/cancel`` ``{"jobId", "reason"}``: CancelJob (operator only).
- ``GET /api/ops/schedules``, ``POST /api/ops/schedules/pause`` and ``.../resume``:
  the schedules with their fire times, and pausing one (san_jobs.web._ops_schedules).

Writes go through the same guards as every other write (:class:`SessionGuard`: the
session's ``X-CSRF-Token`` and same-origin; :class:`BodyGuard`: JSON only, bounded).
A user whose role does not allow a call gets 403 ``PERMISSION_DENIED``; bad input 422
naming the field, as everywhere in san-web.

With ``--auth off`` there are no users: /ops answers only to clients on this machine
(loopback), who get the operator role (they could run jobsctl as well).

san-web calls JobService with its own token (``--job-service-token-file``): under
``job-service --auth token`` /ops needs that token to have the ``operator`` role
(``viewer`` is enough to look). When JobService refuses it, the answer is 502
``JOB_SERVICE_PERMISSION_DENIED`` saying so, not a blank error.
"""

from __future__ import annotations

import ipaddress
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from san_jobs.client import (
    AsyncJobsClient,
    JobsError,
    PermissionDeniedError,
    UnauthenticatedError,
)
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.shared.display import (
    count_dicts,
    format_time,
    pause_dicts,
    status_name,
)
from san_jobs.web._auth import current_user
from san_jobs.web._body_guard import json_object
from san_jobs.web._errors import error_response, invalid
from san_jobs.web._store import ScrapStore

STATIC = Path(__file__).parent / "static"
VIEW_ROLES = frozenset({"viewer", "operator"})
ACT_ROLES = frozenset({"operator"})
DEFAULT_HOURS = 24
# ListFailureGroups' widest range (31 days); RetryFailed's window is held to the same.
MAX_HOURS = 31 * 24
MAX_MESSAGE_CONTAINS_CHARS = 1_003
MAX_JOB_ID_CHARS = 64
MAX_REASON_CHARS = 500
# At most this many moved job ids go back to the page (the count is always exact).
SHOWN_JOB_IDS = 50
LOCAL_ACTOR = "web:local"
TOKEN_LACKS_ROLE = (
    "san-web's JobService token lacks the operator role: start san-web with "
    "--job-service-token-file holding an operator token (viewer is enough to look)"
)
NO_TOKEN = (
    "JobService does not accept san-web's token (none, revoked or unknown): "
    "give san-web an operator token with --job-service-token-file"
)

log = logging.getLogger("san_web")

JOB_TYPE_NAMES = [
    value.name.removeprefix("JOB_TYPE_")
    for value in pb.JobType.DESCRIPTOR.values
    if value.number != pb.JOB_TYPE_UNSPECIFIED
]


def _client(request: Request) -> AsyncJobsClient:
    client: AsyncJobsClient = request.app.state.jobs
    return client


async def _role(request: Request) -> str | None:
    """The caller's role: its user's, or operator for a loopback client under
    ``--auth off``; None for anyone else."""
    user = current_user(request)
    if user is None:
        if request.app.state.auth.mode == "off":
            host = request.client.host if request.client else ""
            return "operator" if _loopback(host) else None
        return None
    store: ScrapStore = request.app.state.store
    return await store.role(user)


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # not an address (a test client's name): not this machine


def _actor(request: Request) -> str:
    """Who the audit line names (RetryFailed's requested_by): ``web:<user>``."""
    user = current_user(request)
    return LOCAL_ACTOR if user is None else f"web:{user}"


def _denied(role: str | None, needed: frozenset[str]) -> JSONResponse:
    needs = " or ".join(sorted(needed))
    return error_response(
        403, "PERMISSION_DENIED", f"this needs the {needs} role (yours: {role or 'none'})"
    )


def _job_service_error(error: JobsError) -> Response | None:
    """JobService refusing san-web itself (its token), told as such; None for the
    errors the app's own handler answers."""
    if isinstance(error, PermissionDeniedError):
        log.warning("/ops: JobService refused san-web's token: %r", error.message)
        return error_response(502, "JOB_SERVICE_PERMISSION_DENIED", TOKEN_LACKS_ROLE)
    if isinstance(error, UnauthenticatedError):
        log.warning("/ops: JobService does not know san-web's token: %r", error.message)
        return error_response(502, "JOB_SERVICE_UNAUTHENTICATED", NO_TOKEN)
    return None


# Which page /ops is depends on who asks: a browser must not answer it from its cache
# (a file's Last-Modified lets it, heuristically) after another user logs in.
NO_STORE = {"Cache-Control": "no-store"}


async def ops_page(request: Request) -> Response:
    if await _role(request) not in VIEW_ROLES:
        return FileResponse(STATIC / "ops-denied.html", status_code=403, headers=NO_STORE)
    return FileResponse(STATIC / "ops.html", headers=NO_STORE)


def _overview(stats: pb.GetJobStatsResponse, now: datetime) -> dict[str, Any]:
    oldest: dict[str, Any] | None = None
    if stats.HasField("oldest_pending_create_time"):
        created = stats.oldest_pending_create_time.ToDatetime(tzinfo=UTC)
        oldest = {
            "createTime": format_time(stats.oldest_pending_create_time),
            "ageSeconds": max(0.0, round((now - created).total_seconds(), 1)),
        }
    return {
        "now": now.isoformat(timespec="seconds").replace("+00:00", "Z"),
        "jobTypes": JOB_TYPE_NAMES,
        "counts": count_dicts(stats),
        "oldestPending": oldest,
        "paused": pause_dicts(stats),
    }


async def overview(request: Request) -> Response:
    role = await _role(request)
    if role not in VIEW_ROLES:
        return _denied(role, VIEW_ROLES)
    try:
        stats = await _client(request).get_job_stats()
    except JobsError as error:
        refused = _job_service_error(error)
        if refused is None:
            raise  # the app's JobsError handler answers it (503, 502, 422, 409, ...)
        return refused
    body = _overview(stats, datetime.now(UTC))
    body["user"] = current_user(request)
    body["role"] = role
    return JSONResponse(body)


def _hours(raw: object, field: str, out: list[tuple[str, str]]) -> int:
    """A whole number of hours, 1 to MAX_HOURS (a number, or its text in a query)."""
    if raw is None or raw == "":
        return DEFAULT_HOURS
    if isinstance(raw, str) and raw.strip().isdigit():
        raw = int(raw.strip())
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= MAX_HOURS:
        out.append((field, f"must be a whole number of hours from 1 to {MAX_HOURS}"))
        return DEFAULT_HOURS
    return raw


def _job_type(raw: object, field: str, out: list[tuple[str, str]]) -> list[pb.JobType.ValueType]:
    """[] for any type, else the one named (``CARD_ANALYSIS``, ``card-analysis``)."""
    if raw is None or raw == "":
        return []
    name = raw.strip().upper().replace("-", "_") if isinstance(raw, str) else None
    if name not in JOB_TYPE_NAMES:
        out.append((field, f"must be one of {', '.join(JOB_TYPE_NAMES)}"))
        return []
    return [pb.JobType.Value(f"JOB_TYPE_{name}")]


async def failures(request: Request) -> Response:
    role = await _role(request)
    if role not in VIEW_ROLES:
        return _denied(role, VIEW_ROLES)
    out: list[tuple[str, str]] = []
    hours = _hours(request.query_params.get("hours"), "hours", out)
    job_types = _job_type(request.query_params.get("jobType"), "jobType", out)
    if out:
        return invalid("invalid failures request", *out)
    now = datetime.now(UTC)
    try:
        response = await _client(request).list_failure_groups(
            failed_after=now - timedelta(hours=hours), failed_before=now, job_types=job_types
        )
    except JobsError as error:
        refused = _job_service_error(error)
        if refused is None:
            raise  # the app's JobsError handler answers it (503, 502, 422, 409, ...)
        return refused
    return JSONResponse(
        {
            "hours": hours,
            "failedAfter": format_time(response.failed_after),
            "failedBefore": format_time(response.failed_before),
            "messagePrefixLength": response.message_prefix_length,
            "truncated": response.truncated,
            "groups": [
                {
                    "errorCode": g.error_code,
                    "errorReason": g.error_reason,
                    "messagePrefix": g.message_prefix,
                    "count": g.count,
                    "latestFailTime": format_time(g.latest_fail_time),
                    "exampleJobId": g.example_job_id,
                }
                for g in response.groups
            ],
        }
    )


def _text(raw: object, field: str, limit: int, out: list[tuple[str, str]]) -> str:
    if raw is None:
        return ""
    if not isinstance(raw, str):
        out.append((field, "must be a string"))
        return ""
    if len(raw) > limit:
        out.append((field, f"must be at most {limit} characters"))
    elif "\x00" in raw:
        out.append((field, "must not contain NUL characters"))
    else:
        try:
            raw.encode("utf-8")
        except UnicodeEncodeError:
            out.append((field, "must be valid Unicode text (no lone surrogates)"))
            return ""
        return raw
    return ""


async def retry_failed(request: Request) -> Response:
    """RetryFailed with the page's filters: the FAILED jobs of the last N hours, of a
    type and/or whose message contains a text. ``dryRun`` (the default) only counts."""
    role = await _role(request)
    if role not in ACT_ROLES:
        return _denied(role, ACT_ROLES)
    body = await json_object(request)
    if isinstance(body, JSONResponse):
        return body
    out: list[tuple[str, str]] = []
    job_types = _job_type(body.get("jobType"), "jobType", out)
    contains = _text(
        body.get("errorMessageContains"), "errorMessageContains", MAX_MESSAGE_CONTAINS_CHARS, out
    )
    hours = _hours(body.get("failedWithinHours"), "failedWithinHours", out)
    dry_run = body.get("dryRun", True)
    if not isinstance(dry_run, bool):
        out.append(("dryRun", "must be true or false"))
    if out:
        return invalid("invalid retry request", *out)
    try:
        response = await _client(request).retry_failed(
            job_types=job_types,
            error_message_contains=contains,
            # Never all_failed: the time window is always a criterion.
            failed_after=datetime.now(UTC) - timedelta(hours=hours),
            dry_run=bool(dry_run),
            requested_by=_actor(request),
        )
    except JobsError as error:
        refused = _job_service_error(error)
        if refused is None:
            raise  # the app's JobsError handler answers it (503, 502, 422, 409, ...)
        return refused
    if not dry_run:
        log.warning(
            "/ops: %s retried %d failed jobs (matched %d)",
            _actor(request),
            response.retried_count,
            response.matched_count,
        )
    return JSONResponse(
        {
            "dryRun": bool(dry_run),
            "matchedCount": response.matched_count,
            "retriedCount": response.retried_count,
            "jobIds": list(response.job_ids[:SHOWN_JOB_IDS]),
            "jobIdCount": len(response.job_ids),
            "skipped": [{"jobId": s.job_id, "reason": s.reason} for s in response.skipped],
        }
    )


async def cancel(request: Request) -> Response:
    role = await _role(request)
    if role not in ACT_ROLES:
        return _denied(role, ACT_ROLES)
    body = await json_object(request)
    if isinstance(body, JSONResponse):
        return body
    out: list[tuple[str, str]] = []
    job_id = _text(body.get("jobId"), "jobId", MAX_JOB_ID_CHARS, out).strip()
    if not job_id and not any(field == "jobId" for field, _ in out):
        out.append(("jobId", "is required"))
    reason = _text(body.get("reason"), "reason", MAX_REASON_CHARS, out)
    if out:
        return invalid("invalid cancel request", *out)
    # CancelJob has no requested_by: the stored reason names who cancelled.
    stated = f"cancelled by {_actor(request)}" + (f": {reason}" if reason else "")
    try:
        job = await _client(request).cancel_job(job_id, reason=stated)
    except JobsError as error:
        refused = _job_service_error(error)
        if refused is None:
            raise  # the app's JobsError handler answers it (503, 502, 422, 409, ...)
        return refused
    log.warning("/ops: %s cancelled job_id=%s", _actor(request), job.id)
    return JSONResponse(
        {"jobId": job.id, "status": status_name(job.status), "cancelReason": job.cancel_reason}
    )


def ops_routes() -> list[Route]:
    return [
        Route("/ops", ops_page),
        Route("/api/ops/overview", overview),
        Route("/api/ops/failures", failures),
        Route("/api/ops/retry-failed", retry_failed, methods=["POST"]),
        Route("/api/ops/cancel", cancel, methods=["POST"]),
    ]
