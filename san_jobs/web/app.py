"""The san-web ASGI app (Starlette): scraps, job status, live job events, the page.

Errors from JobService become HTTP statuses in one place (:func:`jobs_error_response`):
409 duplicate or wrong state, 404 unknown, 422 bad input, 429 rate limited, 503
JobService down, 502 anything else; always with a JSON body ``{"error": {...}}``.
Bodies of writes are bounded and must be JSON (:mod:`san_jobs.web._body_guard`); the
other failures are answered by :mod:`san_jobs.web._failures`, in the same shape.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import sqlalchemy.exc as sa_exc
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from sqlalchemy.ext.asyncio import AsyncConnection
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from san_jobs.client import (
    AsyncJobsClient,
    CardAnalysisInput,
    DuplicateJobError,
    InvalidJobStateError,
    InvalidRequestError,
    Job,
    JobNotFoundError,
    JobsError,
    JobStatus,
    JobType,
    RateLimitedError,
    ServiceUnavailableError,
)
from san_jobs.client._channel import DEFAULT_TIMEOUT
from san_jobs.client._job_types import job_result
from san_jobs.client.inbox import Inbox
from san_jobs.client.outbox import Outbox, OutboxEntry
from san_jobs.proto.jobs.v1.job_service_pb2 import EnqueueRequest
from san_jobs.shared.display import format_time, job_type_name, pause_reason_name, status_name
from san_jobs.web._auth import AuthSettings, SessionGuard, current_user
from san_jobs.web._body_guard import UNREADABLE_JSON, BodyGuard
from san_jobs.web._cards import apply_job_change, cards_of, related_cards
from san_jobs.web._day_routes import day_routes
from san_jobs.web._days import Days, DaySettings
from san_jobs.web._errors import bad_parameter, invalid
from san_jobs.web._failures import on_http_error, on_store_error, on_unexpected_error
from san_jobs.web._login_throttle import LoginThrottle
from san_jobs.web._ops_routes import ops_routes
from san_jobs.web._ops_schedules import schedule_routes
from san_jobs.web._passwords import PasswordChecker
from san_jobs.web._security_headers import AllowedHosts, SecurityHeaders
from san_jobs.web._session_routes import create_session, delete_session, login_page, read_session
from san_jobs.web._store import Scrap, ScrapCursor, ScrapStore

STATIC = Path(__file__).parent / "static"
_VECTOR_TYPES = (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE)
REQUESTED_BY = "san-web"
# The page's own analyses (a scrap saved, a re-analysis asked for): someone is looking
# at the page and waiting, so they go before bulk work (a nightly fan-out at 5).
PAGE_PRIORITY = 1
# The inbox consumer that brings the cards and the days home (a row of san_jobs_inbox;
# named when it brought cards only: a new name would read the retained feed again).
CARDS_CONSUMER = "san-web-cards"
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
DEFAULT_BODY_TIMEOUT = 30.0
JOB_SERVICE_UNAVAILABLE = "JobService is unavailable; try again later"
JOB_SERVICE_FAILED = "JobService failed to answer this request"
QUEUED_REASON = "the job service is not reachable yet"

log = logging.getLogger("san_web")


# A finished job's history ends with the state it ended in, at the time it did.
_EndTime = Literal["complete_time", "fail_time", "cancel_time"]
_END_TIMES: dict[str, _EndTime] = {
    "COMPLETED": "complete_time",
    "FAILED": "fail_time",
    "CANCELLED": "cancel_time",
}


def job_history(job: Job) -> list[dict[str, Any]]:
    """The road a job took, from its timestamps and attempts: a page that opens late
    (or a job the local model finished in milliseconds) still shows PENDING ->
    PROCESSING -> ... with every failed attempt, and a finished job's last entry is
    how it ended (COMPLETED, FAILED or CANCELLED). An active job's current state is
    not in it: that is the job's status."""
    steps: list[dict[str, Any]] = [{"time": format_time(job.create_time), "status": "PENDING"}]
    for attempt in job.attempts:
        running_now = not attempt.HasField("end_time") and attempt.attempt == job.attempt_count
        if running_now and status_name(job.status) == "PROCESSING":
            break  # that is the current state itself
        steps.append(
            {
                "time": format_time(attempt.start_time),
                "status": "PROCESSING",
                "attempt": attempt.attempt,
            }
        )
        if attempt.error_code and attempt.HasField("end_time"):
            steps.append(
                {
                    "time": format_time(attempt.end_time),
                    "status": "ATTEMPT FAILED",
                    "attempt": attempt.attempt,
                    "errorMessage": attempt.error_message,
                }
            )
    status = status_name(job.status)
    end_time = _END_TIMES.get(status)
    if end_time is not None:
        ended = getattr(job, end_time) if job.HasField(end_time) else job.update_time
        end: dict[str, Any] = {"time": format_time(ended), "status": status}
        said = steps[-1].get("errorMessage")
        if status == "FAILED" and job.error_message and job.error_message != said:
            end["errorMessage"] = job.error_message  # not an attempt's (a lost lease)
        steps.append(end)
    return steps


def result_view(result: Message) -> dict[str, Any]:
    """A job's result for the browser, whatever its type: its fields in proto JSON
    (camelCase names, every field present), without vectors (repeated floats: numbers
    for machines, which read them through the SDK)."""
    view = MessageToDict(result, always_print_fields_with_no_presence=True)
    for field in result.DESCRIPTOR.fields:
        if field.is_repeated and field.type in _VECTOR_TYPES:
            view.pop(field.json_name, None)
    return view


def job_view(job: Job) -> dict[str, Any]:
    """The JSON shape of a job for the browser."""
    found = job_result(job)
    return {
        "jobId": job.id,
        "jobType": job_type_name(job.job_type),
        "status": status_name(job.status),
        "errorMessage": job.error_message or None,
        "result": None if found is None else result_view(found[1]),
        "targetId": job.target_id,
        "errorCode": job.error_code or None,
        "attemptCount": job.attempt_count,
        "maxAttempts": job.max_attempts,
        "updateTime": format_time(job.update_time),
        "history": job_history(job),
        "waiting": waiting_view(job),
    }


def waiting_view(job: Job) -> dict[str, Any] | None:
    """Why a PENDING job waits: behind a pause of its type (its provider is failing or
    throttling), or for the jobs it depends on (``jobIds``: those not COMPLETED yet);
    None when it does not: reason, since, until (UTC, as every time)."""
    if not job.HasField("waiting_for"):
        return None
    pause = job.waiting_for
    return {
        "reason": pause_reason_name(pause.reason),
        "since": format_time(pause.since),
        "until": format_time(pause.until),
        "jobIds": list(pause.job_ids),
    }


def error_body(error: JobsError) -> dict[str, Any]:
    body: dict[str, Any] = {"code": error.code.name, "message": error.message}
    if error.reason:
        body["reason"] = error.reason
    if isinstance(error, DuplicateJobError):
        body["existingJobId"] = error.existing_job_id
    if isinstance(error, InvalidRequestError):
        body["fieldViolations"] = [
            {"field": v.field, "description": v.description} for v in error.field_violations
        ]
    if isinstance(error, RateLimitedError) and error.retry_delay is not None:
        body["retryDelaySeconds"] = error.retry_delay
    return {"error": body}


def jobs_error_response(error: JobsError) -> JSONResponse:
    headers: dict[str, str] = {}
    if isinstance(error, DuplicateJobError | InvalidJobStateError):
        status = 409
    elif isinstance(error, JobNotFoundError):
        status = 404
    elif isinstance(error, InvalidRequestError):
        status = 422
    elif isinstance(error, RateLimitedError):
        status = 429
        if error.retry_delay is not None:
            headers["Retry-After"] = str(max(1, round(error.retry_delay)))
    else:
        # The message of these may hold addresses, driver text or a stack: it goes to
        # the log only (repr: no control characters in the log line).
        log.warning("JobService answered %s: %r", error.code.name, error.message)
        if isinstance(error, ServiceUnavailableError):
            status, error.message = 503, JOB_SERVICE_UNAVAILABLE
        else:
            status, error.message = 502, JOB_SERVICE_FAILED
    return JSONResponse(error_body(error), status_code=status, headers=headers)


def not_found(message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": "NOT_FOUND", "message": message}}, status_code=404)


@dataclass(frozen=True)
class OutboxSettings:
    """How san-web's outbox relay polls, backs off and leases a row (seconds).

    A row a killed san-web was sending is free again when its lease ends; the outbox
    bounds each call by half the lease, so the lease is twice the JobService deadline.
    """

    poll_interval: float = 1.0
    max_backoff: float = 5.0
    lease: float = 2 * DEFAULT_TIMEOUT


def _client(request: Request) -> AsyncJobsClient:
    client: AsyncJobsClient = request.app.state.jobs
    return client


def _store(request: Request) -> ScrapStore:
    store: ScrapStore = request.app.state.store
    return store


async def _read_scrap_body(request: Request) -> dict[str, str] | JSONResponse:
    try:
        body = await request.json()
    except UNREADABLE_JSON:
        return invalid("the body must be a JSON object", ("body", "is not valid JSON"))
    if not isinstance(body, dict):
        return invalid("the body must be a JSON object", ("body", "is not a JSON object"))
    violations: list[tuple[str, str]] = []
    values: dict[str, str] = {}
    for name in ("url", "title", "text"):
        value = body.get(name, "")
        if value is None:
            value = ""
        if not isinstance(value, str):
            violations.append((name, "must be a string"))
        elif problem := _unstorable(value):
            violations.append((name, problem))
        values[name] = value if isinstance(value, str) else ""
    if not values["text"].strip() and not any(f == "text" for f, _ in violations):
        violations.append(("text", "is required and must not be blank"))
    if violations:
        return invalid("invalid scrap", *violations)
    return values


def _unstorable(value: str) -> str | None:
    """Why ``value`` cannot be stored (by san-web's own database or JobService's), if
    it cannot: PostgreSQL refuses NUL, and a lone surrogate (``"\\ud800"`` is valid
    JSON) is not encodable as UTF-8 at all."""
    if "\x00" in value:
        return "must not contain NUL characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode text (no lone surrogates)"
    return None


def _scrap_id(request: Request) -> str | None:
    """The path's scrap id if it can be one (ids are UUIDs), so that no odd string
    (NUL, megabytes) ever reaches a query."""
    raw: str = request.path_params["scrap_id"]
    try:
        return str(uuid.UUID(raw)) if len(raw) == 36 else None
    except ValueError:
        return None


async def _find_scrap(request: Request) -> Scrap | None:
    """The path's scrap, if it exists and (with logins) is the caller's own: another
    user's scrap is "no such scrap", so its id cannot be probed."""
    scrap_id = _scrap_id(request)
    if scrap_id is None:
        return None
    return await _store(request).get(scrap_id, owner=current_user(request))


async def _job_id(request: Request) -> str | JSONResponse:
    """The path's job id; with logins, 404 unless san-web made that job for one of the
    caller's scraps (checked here, before JobService is asked anything)."""
    job_id: str = request.path_params["job_id"]
    user = current_user(request)
    if user is not None and (len(job_id) > 36 or not await _store(request).owns_job(job_id, user)):
        return not_found("no such job")
    return job_id


async def _enqueue_analysis(
    request: Request, scrap_id: str, text: str, url: str, title: str
) -> str:
    # Recorded before it is sent: its completion may come back through the change
    # feed before set_job below commits, and must still be known as ours (_cards.py).
    request_id = await _store(request).add_analysis_request(scrap_id, current_user(request))
    response = await _client(request).enqueue(
        scrap_id,
        CardAnalysisInput(text=text, url=url, title=title),
        requested_by=REQUESTED_BY,
        request_id=request_id,
        priority=PAGE_PRIORITY,
    )
    await _store(request).set_job(scrap_id, response.job.id, owner=current_user(request))
    return response.job.id


def _outbox(request: Request) -> Outbox:
    outbox: Outbox = request.app.state.outbox
    return outbox


def _analysis_request(scrap: Scrap) -> EnqueueRequest:
    """The first analysis of ``scrap``, as the outbox will deliver it (its request_id is
    set by the outbox: the row's id)."""
    return EnqueueRequest(
        job_type=JobType.JOB_TYPE_CARD_ANALYSIS,
        target_id=scrap.id,
        requested_by=REQUESTED_BY,
        card_analysis_input=CardAnalysisInput(text=scrap.text, url=scrap.url, title=scrap.title),
        priority=PAGE_PRIORITY,
    )


async def _handoff(request: Request, scrap: Scrap) -> dict[str, Any]:
    """The scrap's job id and the state of its hand-off to JobService; a delivered
    outbox row teaches the scrap (and its owner's job list) the job id."""
    job_id = scrap.job_id
    entry = None if scrap.outbox_id is None else await _outbox(request).entry(scrap.outbox_id)
    if entry is None:
        # Handed off before the outbox existed, or delivered and pruned since.
        state = "delivered" if job_id else None
        return {"jobId": job_id, "state": state, "handoff": {"state": state, "reason": None}}
    if entry.state == "delivered" and entry.job_id and job_id is None:
        await _store(request).record_delivery(entry.id, entry.job_id)
        job_id = entry.job_id
    state = entry.state
    if state == "queued" and job_id is not None:
        # Its job has come back already (the change feed's card handler recorded it)
        # before the relay wrote down its own delivery: the hand-off is done.
        state = "delivered"
    reason = entry.error if state == "refused" else None
    if state == "queued" and entry.error:
        reason = QUEUED_REASON  # a delivery failed (the error itself stays in the log)
    return {"jobId": job_id, "state": state, "handoff": {"state": state, "reason": reason}}


async def create_scrap(request: Request) -> Response:
    """Save a scrap and its analysis request in one transaction; 202 at once. The
    outbox relay delivers the request (now, or when JobService is back)."""
    values = await _read_scrap_body(request)
    if isinstance(values, JSONResponse):
        return values
    outbox = _outbox(request)

    async def hand_off(connection: AsyncConnection, scrap: Scrap) -> str:
        return await outbox.add(connection, _analysis_request(scrap))

    scrap = await _store(request).add(**values, owner=current_user(request), hand_off=hand_off)
    return JSONResponse({"scrapId": scrap.id, **await _handoff(request, scrap)}, status_code=202)


async def _cards(request: Request, scrap_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The knowledge cards of these scraps in JSON, from san-web's own table (never
    from JobService, which prunes finished jobs)."""
    async with _store(request).engine.connect() as connection:
        found = await cards_of(connection, scrap_ids)
    return {scrap_id: card.view() for scrap_id, card in found.items()}


async def get_scrap(request: Request) -> Response:
    scrap = await _find_scrap(request)
    if scrap is None:
        return not_found("no such scrap")
    cards = await _cards(request, [scrap.id])
    return JSONResponse(
        {
            "scrapId": scrap.id,
            "url": scrap.url,
            "title": scrap.title,
            "text": scrap.text,
            **await _handoff(request, scrap),
            "createdAt": scrap.created_at.isoformat(),
            "card": cards.get(scrap.id),
        }
    )


DEFAULT_SCRAPS_PAGE_SIZE = 20
MAX_SCRAPS_PAGE_SIZE = 100
EXCERPT_CHARS = 200
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _page_token(scrap: Scrap) -> str:
    """Where the next page starts: the last scrap's creation time (microseconds since
    the epoch) and id, opaque to the caller."""
    micros = (scrap.created_at - _EPOCH) // timedelta(microseconds=1)
    return base64.urlsafe_b64encode(f"{micros}:{scrap.id}".encode()).decode().rstrip("=")


def _read_page_token(raw: str) -> ScrapCursor | None:
    try:
        text = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode("ascii")
        micros, scrap_id = text.split(":")
        return ScrapCursor(_EPOCH + timedelta(microseconds=int(micros)), str(uuid.UUID(scrap_id)))
    except (ValueError, binascii.Error, OverflowError, UnicodeDecodeError):
        return None


async def list_scraps(request: Request) -> Response:
    """The caller's scraps newest first (everyone's under --auth off), a page at a
    time (``pageSize`` up to MAX_SCRAPS_PAGE_SIZE, ``pageToken`` from the previous
    page's ``nextPageToken``), each with its card and its hand-off to JobService."""
    raw_size = request.query_params.get("pageSize", "")
    size = DEFAULT_SCRAPS_PAGE_SIZE
    if raw_size:
        if not raw_size.isdigit() or not 1 <= int(raw_size) <= MAX_SCRAPS_PAGE_SIZE:
            return bad_parameter(
                "pageSize", f"must be a whole number from 1 to {MAX_SCRAPS_PAGE_SIZE}"
            )
        size = int(raw_size)
    raw_token = request.query_params.get("pageToken", "")
    after = None
    if raw_token:
        after = _read_page_token(raw_token) if len(raw_token) <= 200 else None
        if after is None:
            return bad_parameter("pageToken", "is not a token this API gave")
    # One more than asked: whether there is a next page, without a count.
    found = await _store(request).list_page(
        owner=current_user(request), limit=size + 1, after=after
    )
    page = found[:size]
    cards = await _cards(request, [scrap.id for scrap in page])
    items = [
        {
            "scrapId": scrap.id,
            "url": scrap.url,
            "title": scrap.title,
            "excerpt": scrap.text[:EXCERPT_CHARS],
            **await _handoff(request, scrap),
            "createdAt": scrap.created_at.isoformat(),
            "card": cards.get(scrap.id),
        }
        for scrap in page
    ]
    next_token = _page_token(page[-1]) if len(found) > size else ""
    return JSONResponse({"scraps": items, "nextPageToken": next_token})


async def related_scraps(request: Request) -> Response:
    """The scraps whose cards are most like this one's (embeddings, cosine), best
    first, at most 5; [] while it has no card. Another user's scrap is 404."""
    scrap = await _find_scrap(request)
    if scrap is None:
        return not_found("no such scrap")
    async with _store(request).engine.connect() as connection:
        found = await related_cards(connection, scrap.id, owner=current_user(request))
    return JSONResponse({"scrapId": scrap.id, "related": [card.view() for card in found]})


async def analyze_scrap(request: Request) -> Response:
    """Analyse a scrap again; 409 while its previous analysis is still active. This one
    calls Enqueue directly (no outbox): the user is there to read the answer, and a
    409 or 503 is that answer."""
    scrap = await _find_scrap(request)
    if scrap is None:
        return not_found("no such scrap")
    job_id = await _enqueue_analysis(request, scrap.id, scrap.text, scrap.url, scrap.title)
    return JSONResponse({"scrapId": scrap.id, "jobId": job_id}, status_code=202)


async def delete_scrap(request: Request) -> Response:
    store = _store(request)
    scrap = await _find_scrap(request)
    if scrap is None:
        return not_found("no such scrap")
    scrap_id = scrap.id
    client = _client(request)
    active = await client.list_jobs(
        target_id=scrap_id,
        job_types=[JobType.JOB_TYPE_CARD_ANALYSIS],
        statuses=[JobStatus.JOB_STATUS_PENDING, JobStatus.JOB_STATUS_PROCESSING],
        page_size=1000,
    )
    cancelled: list[str] = []
    for job in active.jobs:
        try:
            await client.cancel_job(job.id, reason="scrap deleted")
        except (InvalidJobStateError, JobNotFoundError):
            continue  # it finished meanwhile: nothing to cancel
        cancelled.append(job.id)
    await store.delete(scrap_id)
    # A day whose note was waiting for this card was cancelled with it: made again.
    days: Days = request.app.state.days
    await days.remake_without(current_user(request), scrap_id, cancelled)
    return JSONResponse({"scrapId": scrap_id, "deleted": True, "cancelledJobIds": cancelled})


async def get_async_job(request: Request) -> Response:
    job_id = await _job_id(request)
    if isinstance(job_id, JSONResponse):
        return job_id
    job = await _client(request).get_job(job_id)
    return JSONResponse(job_view(job))


# A quiet job (a slow model) must not look like a dead connection to a proxy.
SSE_HEARTBEAT_SECONDS = 15.0


def _sse(event: str, data: Any) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


async def async_job_events(request: Request) -> Response:
    """Server-Sent Events: one ``job`` event per state, then ``end``.

    A broken JobService stream is bridged by the SDK (it polls instead); if JobService
    is gone for good, a ``problem`` event says so before ``end``.
    """
    client = _client(request)
    job_id = await _job_id(request)
    if isinstance(job_id, JSONResponse):
        return job_id
    await client.get_job(job_id)  # unknown or malformed id: a plain 404/422, not a stream

    async def events(out: asyncio.Queue[str | None]) -> None:
        try:
            async for job in client.watch(job_id):
                await out.put(_sse("job", job_view(job)))
        except JobsError as error:
            await out.put(_sse("problem", error_body(error)))
        await out.put(_sse("end", {"jobId": job_id}))
        await out.put(None)

    async def stream() -> AsyncIterator[str]:
        yield "retry: 2000\n\n"
        out: asyncio.Queue[str | None] = asyncio.Queue()
        producer = asyncio.create_task(events(out))
        try:
            while True:
                try:
                    item = await asyncio.wait_for(out.get(), SSE_HEARTBEAT_SECONDS)
                except TimeoutError:
                    # A comment line keeps proxies from closing a quiet stream.
                    yield ": keepalive\n\n"
                    continue
                if item is None:
                    return
                yield item
        finally:
            producer.cancel()

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def index(request: Request) -> Response:
    return FileResponse(STATIC / "index.html")


async def health(request: Request) -> Response:
    """Alive; and whether the cards' inbox consumes (a halted or failing inbox still
    answers 200: the pages work, the cards lag; the operator reads ``inbox``)."""
    inbox: Inbox | None = getattr(request.app.state, "inbox", None)
    if inbox is None:
        return JSONResponse({"status": "ok"})
    seen = inbox.health()
    return JSONResponse(
        {
            "status": "ok",
            "inbox": {
                "state": seen.state,
                "ok": seen.ok,
                "lastError": seen.last_error,
                "oldestCursor": seen.oldest_cursor,
            },
        }
    )


async def _on_jobs_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, JobsError)
    return jobs_error_response(error)


class _SanWeb(Starlette):
    """Starlette with :class:`SecurityHeaders` outside everything, so that even the
    500 of its outermost error middleware carries them."""

    def build_middleware_stack(self) -> ASGIApp:
        return SecurityHeaders(super().build_middleware_stack())


def create_app(
    *,
    job_service: str,
    database_url: str,
    client_factory: Callable[[str], AsyncJobsClient] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    body_timeout: float = DEFAULT_BODY_TIMEOUT,
    auth: AuthSettings | None = None,
    allowed_hosts: Sequence[str] = ("*",),
    login_throttle: LoginThrottle | None = None,
    outbox_settings: OutboxSettings | None = None,
    day_settings: DaySettings | None = None,
    job_service_identity: str | None = None,
) -> Starlette:
    """The app; JobService at ``job_service`` (HOST:PORT), scraps in ``database_url``;
    request bodies of at most ``max_body_bytes``, all in within ``body_timeout`` s;
    users as ``auth`` says (no login by default); answers only to a ``Host`` in
    ``allowed_hosts``; failed logins limited by ``login_throttle``; scraps handed to
    JobService through the outbox, its relay run as ``outbox_settings`` say; each
    user's day made at its end as ``day_settings`` say. ``job_service_identity``:
    san-web's name as JobService records it on the jobs san-web makes (when known);
    the inbox then applies only those jobs' changes and logs any other."""
    make_client = client_factory or AsyncJobsClient
    relay = outbox_settings or OutboxSettings()
    auth_settings = auth or AuthSettings()
    days_settings = day_settings or DaySettings(shared_space=auth_settings.mode == "off")

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        app.state.store = store = await ScrapStore.open(database_url)
        app.state.jobs = make_client(job_service)

        async def on_delivered(entry: OutboxEntry) -> None:
            if entry.job_id:
                await store.record_delivery(entry.id, entry.job_id)

        app.state.outbox = Outbox(
            store.engine,
            app.state.jobs,
            lease=relay.lease,
            poll_interval=relay.poll_interval,
            max_backoff=relay.max_backoff,
            on_delivered=on_delivered,
        )
        await app.state.outbox.start()
        app.state.days = days = Days(store, app.state.jobs, app.state.outbox, days_settings)

        async def apply_change(conn: AsyncConnection, job: Job) -> None:
            if job.job_type == JobType.JOB_TYPE_CARD_ANALYSIS:
                await apply_job_change(conn, job)
            else:
                await days.apply_job_change(conn, job)

        # The cards and the days come home through the change feed: each change is
        # applied in san-web's own transaction with the feed's cursor
        # (san_jobs.client.inbox), so they survive JobService's retention and
        # san-web's crashes, made once. FAILED and CANCELLED tell a day why it has no
        # note (the cards' handler ignores them).
        app.state.inbox = Inbox(
            store.engine,
            app.state.jobs,
            CARDS_CONSUMER,
            apply_change,
            job_types=[
                JobType.JOB_TYPE_CARD_ANALYSIS,
                JobType.JOB_TYPE_TIL_GENERATION,
                JobType.JOB_TYPE_RECALL_GENERATION,
            ],
            statuses=[
                JobStatus.JOB_STATUS_COMPLETED,
                JobStatus.JOB_STATUS_FAILED,
                JobStatus.JOB_STATUS_CANCELLED,
            ],
            requested_by=job_service_identity,
        )
        await app.state.inbox.start()
        await days.start()
        try:
            yield
        finally:
            await days.stop()
            await app.state.inbox.stop()
            await app.state.outbox.stop()
            await app.state.jobs.close()
            await app.state.store.close()

    routes = [
        Route("/", index),
        Route("/healthz", health),
        Route("/login", login_page),
        Route("/api/session", create_session, methods=["POST"]),
        Route("/api/session", read_session, methods=["GET"]),
        Route("/api/session", delete_session, methods=["DELETE"]),
        Route("/api/scraps", create_scrap, methods=["POST"]),
        Route("/api/scraps", list_scraps, methods=["GET"]),
        Route("/api/scraps/{scrap_id}", get_scrap, methods=["GET"]),
        Route("/api/scraps/{scrap_id}", delete_scrap, methods=["DELETE"]),
        Route("/api/scraps/{scrap_id}/analyze", analyze_scrap, methods=["POST"]),
        Route("/api/scraps/{scrap_id}/related", related_scraps, methods=["GET"]),
        Route("/api/async-jobs/{job_id}", get_async_job),
        Route("/api/async-jobs/{job_id}/events", async_job_events),
        *day_routes(),
        *ops_routes(),
        *schedule_routes(),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    app = _SanWeb(
        routes=routes,
        lifespan=lifespan,
        middleware=[
            Middleware(AllowedHosts, allowed=allowed_hosts),
            # Who calls is settled before any body is read.
            Middleware(SessionGuard, settings=auth_settings),
            Middleware(BodyGuard, max_body_bytes=max_body_bytes, body_timeout=body_timeout),
        ],
        exception_handlers={
            JobsError: _on_jobs_error,
            HTTPException: on_http_error,
            sa_exc.SQLAlchemyError: on_store_error,
            # A refused connection to the scraps database is a bare OSError: SQLAlchemy
            # wraps only the driver's own exceptions (JobService errors are JobsError).
            OSError: on_store_error,
            Exception: on_unexpected_error,
        },
    )
    app.state.max_body_bytes = max_body_bytes
    app.state.auth = auth_settings
    app.state.login_throttle = login_throttle or LoginThrottle()
    app.state.passwords = PasswordChecker(logins=auth_settings.mode == "password")
    return app
