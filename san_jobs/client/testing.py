"""An in-memory JobService for your tests, under the real clients.

:class:`FakeJobService` keeps jobs in memory and answers the calls of
:class:`~san_jobs.client.JobsClient` and :class:`~san_jobs.client.AsyncJobsClient`,
which it hands out: the clients' own code runs (requests, errors, ``wait`` and
``watch``), only the network is gone. Jobs move when the test moves them, or at once
through ``run``::

    from san_jobs.client import CardAnalysisInput, CardAnalysisResult, JobStatus
    from san_jobs.client.testing import FakeJobService

    def test_a_summary_is_shown() -> None:
        service = FakeJobService()
        with service.client() as client:  # service.async_client() for asyncio code
            job = client.enqueue("scrap-1", CardAnalysisInput(text="Some page text")).job
            service.complete(job.id, CardAnalysisResult(summary="Short."))
            assert client.wait(job.id, timeout=5).status == JobStatus.JOB_STATUS_COMPLETED

    # Every job completes (or fails, if `run` raises) as soon as it is enqueued:
    service = FakeJobService(run=lambda job: CardAnalysisResult(summary="Short."))

As JobService does, it refuses a request without a target, type or matching input
(:class:`~san_jobs.client.InvalidRequestError` naming the fields), a job id that is
not a UUID, a second active job for the same (job type, target)
(:class:`~san_jobs.client.DuplicateJobError`, or the existing job with
``return_existing``), and cancelling a finished job; a repeated ``request_id``
returns the first job (``deduplicated``). Watchers (``watch``, ``wait``,
``stream_job_updates``) hear every change; ``stream_job_changes`` (and so the inbox)
reads the change feed: every move into COMPLETED, FAILED or CANCELLED and a retry's
FAILED -> PENDING, after a cursor (``fake.N``), then live. ``fail_next`` makes the next calls of an
RPC fail (JobService down, rate limited, ...), ``break_streams`` ends the open
streams as a server going away does, and ``calls`` lists what was called.

Schedules (CreateSchedule, ... ResumeSchedule) are stored per caller (the token a
call carries) and checked as JobService checks them: the id, exactly one of cron or
interval (at least 1 s), a time zone only with cron, a template Enqueue would take
with no request_id; the same id with another definition is
:class:`~san_jobs.client.ScheduleExistsError`, with the same one the stored schedule.
The fake never fires a schedule by itself: ``fire_schedule`` fires one period when
the test says so, as JobService would (its request_id, last_fire_time, last_job_id).
It reads no crontab (a cron expression needs five fields, no more is checked, and
its next_fire_time stays unset); an interval schedule's next_fire_time is computed.

Not modelled: tokens (sent, never checked: one tenant of jobs; they only scope
schedules), retention (PruneJobs deletes nothing, no change expires, no progress
mark is sent), the server's limits on streams and message sizes, and the contents
of inputs (a blank text is stored). It needs nothing but the SDK's own dependencies.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
import uuid
import zoneinfo
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import grpc
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from san_jobs.client._async_client import AsyncJobsClient
from san_jobs.client._channel import DEFAULT_TIMEOUT, ChannelSettings
from san_jobs.client._client import JobsClient
from san_jobs.client._errors import (
    DuplicateJobError,
    FieldViolation,
    InvalidJobStateError,
    InvalidRequestError,
    JobNotFoundError,
    JobsError,
    ScheduleExistsError,
    ScheduleNotFoundError,
    ServiceUnavailableError,
    rpc_error_from,
    status_from_error,
)
from san_jobs.client._job_types import JOB_TYPES, job_type_info
from san_jobs.client._requests import TERMINAL_STATUSES, timestamp
from san_jobs.client._transport import SERVICE
from san_jobs.client._views import as_message, result
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

__all__ = ["Call", "FakeJobService"]

DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_PAGE_SIZE = 50
DEFAULT_RETRY_LIMIT = 1_000
MAX_PAGE_SIZE = 1_000
MAX_BATCH = 1_000
MAX_TEXT_FIELD_CHARS = 256
MAX_ATTEMPTS_LIMIT = 100
MAX_DEPENDENCIES = 100
MAX_DEPENDENCY_DEPTH = 32
FAILURE_PREFIX_CHARS = 80
DAY_NS = 24 * 3600 * 10**9
DEFAULT_SCHEDULE_PAGE_SIZE = 100
MAX_CRON_CHARS = 256
CRON_FIELDS = 5
MIN_INTERVAL_SECONDS = 1
MAX_SPAN_SECONDS = 366 * 24 * 3600
_SCHEDULE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
# JobService's own request ids (its schedules' periods); a caller's is refused.
PERIOD_REQUEST_ID_PREFIX = "schedule:"
RESERVED_REQUEST_ID = (
    f"must not begin with {PERIOD_REQUEST_ID_PREFIX!r}: those are the request ids of"
    " schedules' periods, which JobService sets itself"
)
_ACTIVE = frozenset({pb.JOB_STATUS_PENDING, pb.JOB_STATUS_PROCESSING})
_END = object()

Runner = Callable[[pb.Job], Message]
"""``run(job)``: the result message of a job just enqueued (or retried); an exception
it raises fails the job with its text."""


@dataclass(frozen=True)
class Call:
    """One call the fake answered: the RPC's name (``Enqueue``, ``GetJob``, ...), the
    request as sent, and its metadata (``{"authorization": "Bearer ..."}``)."""

    rpc: str
    request: Message
    metadata: dict[str, str]


def _invalid(*violations: tuple[str, str]) -> InvalidRequestError:
    shown = "; ".join(f"{field} {description}" for field, description in violations)
    return InvalidRequestError(
        f"invalid request: {shown}",
        code=grpc.StatusCode.INVALID_ARGUMENT,
        reason="INVALID_REQUEST",
        field_violations=[FieldViolation(f, d) for f, d in violations],
    )


def _not_found(job_id: str) -> JobNotFoundError:
    return JobNotFoundError(
        f"job {job_id} not found",
        code=grpc.StatusCode.NOT_FOUND,
        reason="JOB_NOT_FOUND",
        metadata={"jobId": job_id},
    )


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return len(value) <= 64


def _status_name(status: int) -> str:
    """COMPLETED: a status as JobService names it in messages and error metadata."""
    return pb.JobStatus.Name(pb.JobStatus.ValueType(status)).removeprefix("JOB_STATUS_")


def _ns(stamp: Timestamp) -> int:
    return int(stamp.ToNanoseconds())


class FakeJobService:
    """JobService in memory, for tests; see the module for what it does.

    Thread-safe: a test may move jobs from its own thread while clients wait in
    theirs. ``run``, when given, completes each job as soon as it is enqueued (see
    :data:`Runner`); otherwise jobs stay PENDING until :meth:`start`,
    :meth:`complete` or :meth:`fail`.
    """

    def __init__(self, *, run: Runner | None = None) -> None:
        self._run = run
        self._lock = threading.RLock()
        self._jobs: dict[str, pb.Job] = {}
        self._by_request_id: dict[str, str] = {}
        # job id -> the jobs that depend on it (EnqueueRequest.depends_on).
        self._dependents: dict[str, list[str]] = {}
        self._watchers: list[_Watcher] = []
        # The change feed: each change's job (without input), in order; its streams.
        self._changes: list[pb.Job] = []
        self._published_status: dict[str, int] = {}
        self._change_streams: list[_Signal] = []
        self._faults: dict[str, list[JobsError]] = {}
        self._calls: list[Call] = []
        self._last_ns = 0
        # (caller, schedule_id) -> the stored schedule (see create_schedule).
        self._schedules: dict[tuple[str, str], pb.Schedule] = {}
        self._stub = _FakeStub(self)

    # -- clients -------------------------------------------------------------

    def client(self, *, token: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> JobsClient:
        """A :class:`JobsClient` of this service (close it, or use ``with``)."""
        return JobsClient._over(self._settings(token, timeout), self._stub)

    def async_client(
        self, *, token: str | None = None, timeout: float = DEFAULT_TIMEOUT
    ) -> AsyncJobsClient:
        """An :class:`AsyncJobsClient` of this service (``async with`` it)."""
        return AsyncJobsClient._over(self._settings(token, timeout), self._stub)

    @staticmethod
    def _settings(token: str | None, timeout: float) -> ChannelSettings:
        return ChannelSettings.build("in-memory", token=token, timeout=timeout)

    # -- what a test reads ---------------------------------------------------

    @property
    def jobs(self) -> list[pb.Job]:
        """Every job, oldest first (copies, enums printing as names)."""
        with self._lock:
            return [self._copy(job) for job in self._jobs.values()]

    def job(self, job_id: str) -> pb.Job:
        """One job (a copy); KeyError when there is none."""
        with self._lock:
            return self._copy(self._jobs[job_id])

    @property
    def calls(self) -> list[Call]:
        """Every call answered so far, in order."""
        with self._lock:
            return list(self._calls)

    # -- what a test does ----------------------------------------------------

    def start(self, job_id: str) -> pb.Job:
        """Move a PENDING job to PROCESSING: a worker claimed it (one more attempt)."""
        with self._lock:
            job = self._job(job_id, pb.JOB_STATUS_PENDING)
            self._start(job)
            return self._publish(job)

    def complete(
        self, job_id: str, job_result: Message, *, usage: pb.Usage | None = None
    ) -> pb.Job:
        """Finish a PENDING or PROCESSING job with ``job_result`` (its type's result
        message); ``usage`` is what its attempt consumed (for GetUsage)."""
        with self._lock:
            message = as_message(job_result)
            waiting = self._job(job_id, pb.JOB_STATUS_PENDING, pb.JOB_STATUS_PROCESSING)
            _result_field(waiting, message)  # checked before the job moves at all
            job = self._started(job_id)
            self._complete(job, message, usage)
            return self._publish(job)

    def fail(
        self, job_id: str, message: str = "failed", *, code: str = "INTERNAL", reason: str = ""
    ) -> pb.Job:
        """Fail a PENDING or PROCESSING job for good, with ``message`` as its
        error_message (and ``code``, ``reason`` as error_code, error_reason)."""
        with self._lock:
            job = self._started(job_id)
            self._fail(job, message, code, reason)
            return self._publish(job)

    def fail_next(self, rpc: str, error: JobsError, *, times: int = 1) -> None:
        """Make the next ``times`` calls of ``rpc`` (the contract's name: ``Enqueue``,
        ``GetJob``, ``StreamJobUpdates``, ...) fail with ``error``, as sent by a
        server (``ServiceUnavailableError("down", code=grpc.StatusCode.UNAVAILABLE)``)."""
        if SERVICE.methods_by_name.get(rpc) is None:
            raise ValueError(f"JobService has no RPC {rpc!r}")
        with self._lock:
            self._faults.setdefault(rpc, []).extend([error] * times)

    def break_streams(self, error: JobsError | None = None) -> None:
        """End every open stream with ``error`` (UNAVAILABLE by default), after what it
        has sent: a server going away. A watcher falls back to polling."""
        error = error or ServiceUnavailableError(
            "the server went away", code=grpc.StatusCode.UNAVAILABLE
        )
        with self._lock:
            watchers, self._watchers = self._watchers, []
            change_streams, self._change_streams = self._change_streams, []
        for watcher in watchers:
            watcher.push(error)
        for signal in change_streams:
            signal.push(error)

    # -- the service ---------------------------------------------------------

    def _answer(self, rpc: str, request: Message, metadata: Iterable[tuple[str, str]]) -> None:
        """Record a call, and raise the fault planned for it, if any."""
        sent = type(request)()
        sent.CopyFrom(request)
        with self._lock:
            self._calls.append(Call(rpc, sent, dict(metadata or ())))
            planned = self._faults.get(rpc)
            fault = planned.pop(0) if planned else None
        if fault is not None:
            raise fault

    def _now(self) -> Timestamp:
        self._last_ns = max(time.time_ns(), self._last_ns + 1)  # each change a new time
        stamp = Timestamp()
        stamp.FromNanoseconds(self._last_ns)
        return stamp

    def _copy(self, job: pb.Job) -> pb.Job:
        copied = pb.Job()
        copied.CopyFrom(job)
        return result(copied)

    def _job(self, job_id: str, *allowed: pb.JobStatus.ValueType) -> pb.Job:
        job = self._jobs.get(job_id)
        if job is None:
            raise KeyError(f"no job {job_id}")
        if job.status not in allowed:
            wanted = " or ".join(_status_name(status) for status in allowed)
            raise ValueError(f"job {job_id} is {_status_name(job.status)}, not {wanted}")
        return job

    def _started(self, job_id: str) -> pb.Job:
        """A PROCESSING job: a PENDING one is started first (its watchers hear both)."""
        job = self._job(job_id, pb.JOB_STATUS_PENDING, pb.JOB_STATUS_PROCESSING)
        if job.status == pb.JOB_STATUS_PENDING:
            self._start(job)
            self._publish(job)
        return job

    def _publish(self, job: pb.Job) -> pb.Job:
        """Tell every watcher of ``job`` its new state; a copy for the caller."""
        job.update_time.CopyFrom(self._now())
        for watcher in list(self._watchers):
            if watcher.hears(job) and not watcher.push(self._copy(job)):
                self._watchers.remove(watcher)
        before = self._published_status.get(job.id)
        self._published_status[job.id] = job.status
        if job.status != before and (
            job.status in TERMINAL_STATUSES
            or (job.status == pb.JOB_STATUS_PENDING and before == pb.JOB_STATUS_FAILED)
        ):
            change = pb.Job()
            change.CopyFrom(job)
            case = change.WhichOneof("input")
            if case is not None:
                change.ClearField(case)  # the feed carries no input, as JobService's
            self._changes.append(change)
            for signal in list(self._change_streams):
                if not signal.push(_MOVED):
                    self._change_streams.remove(signal)
        if job.status in TERMINAL_STATUSES and job.id in self._dependents:
            self._dependency_ended(job)
        return self._copy(job)

    def _start(self, job: pb.Job) -> None:
        now = self._now()
        job.status = pb.JOB_STATUS_PROCESSING
        job.attempt_count += 1
        job.start_time.CopyFrom(now)
        job.ClearField("next_attempt_time")
        job.attempts.add(attempt=job.attempt_count, start_time=now)

    def _end_attempt(
        self, job: pb.Job, code: str = "", reason: str = "", message: str = ""
    ) -> None:
        if job.attempts and not job.attempts[-1].HasField("end_time"):
            attempt = job.attempts[-1]
            attempt.end_time.CopyFrom(self._now())
            attempt.error_code, attempt.error_reason, attempt.error_message = code, reason, message

    def _complete(self, job: pb.Job, job_result: Message, usage: pb.Usage | None) -> None:
        getattr(job, _result_field(job, job_result)).CopyFrom(job_result)
        self._end_attempt(job)
        if usage is not None:
            job.attempts[-1].usage.CopyFrom(usage)
        job.status = pb.JOB_STATUS_COMPLETED
        job.complete_time.CopyFrom(self._now())

    def _fail(self, job: pb.Job, message: str, code: str, reason: str) -> None:
        self._end_attempt(job, code, reason, message)
        job.status = pb.JOB_STATUS_FAILED
        job.error_message, job.error_code, job.error_reason = message, code, reason
        job.fail_time.CopyFrom(self._now())

    def _ran(self, job: pb.Job) -> None:
        """Run a PENDING job at once through ``run``, when there is one."""
        if self._run is None:
            return
        self._start(job)
        self._publish(job)
        try:
            answer = self._run(self._copy(job))
        except Exception as error:
            self._fail(job, str(error) or type(error).__name__, "INTERNAL", "")
        else:
            self._complete(job, as_message(answer), None)
        self._publish(job)

    def _active(self, job_type: int, target_id: str) -> pb.Job | None:
        for job in self._jobs.values():
            if job.job_type == job_type and job.target_id == target_id and job.status in _ACTIVE:
                return job
        return None

    def enqueue(self, request: pb.EnqueueRequest) -> pb.EnqueueResponse:
        """Enqueue as JobService answers it (JobsError for a refusal)."""
        _check_enqueue(request)
        if request.request_id.startswith(PERIOD_REQUEST_ID_PREFIX):
            raise _invalid(("request_id", RESERVED_REQUEST_ID))
        return self._enqueue_checked(request)

    def _enqueue_checked(self, request: pb.EnqueueRequest) -> pb.EnqueueResponse:
        """Enqueue's store part (a schedule's period uses a reserved request_id)."""
        with self._lock:
            known = self._by_request_id.get(request.request_id) if request.request_id else None
            if known is not None:
                return _response(self._jobs[known], deduplicated=True)
            active = self._active(request.job_type, request.target_id)
            if active is not None:
                if request.on_duplicate == pb.ON_DUPLICATE_RETURN_EXISTING:
                    return _response(active, deduplicated=True)
                raise DuplicateJobError(
                    f"an active job already exists for this job type and target: {active.id}",
                    code=grpc.StatusCode.ALREADY_EXISTS,
                    reason="DUPLICATE_JOB",
                    metadata={"existingJobId": active.id},
                )
            self._check_dependencies(request)
            job = self._new_job(request)
            answer = _response(job, deduplicated=False)
            if job.status == pb.JOB_STATUS_PENDING and not job.HasField("waiting_for"):
                self._ran(job)
            return answer

    def _check_dependencies(self, request: pb.EnqueueRequest) -> None:
        """depends_on as JobService checks it: each a known job (the fake does not
        check the caller or the types a job takes)."""
        unknown = [
            (f"depends_on[{index}]", f"no job {job_id}")
            for index, job_id in enumerate(request.depends_on)
            if job_id not in self._jobs
        ]
        too_deep = [
            (
                f"depends_on[{index}]",
                f"job {job_id} is already {self._depth(job_id)} dependencies deep;"
                f" a chain of jobs is at most {MAX_DEPENDENCY_DEPTH} deep",
            )
            for index, job_id in enumerate(request.depends_on)
            if job_id in self._jobs and self._depth(job_id) >= MAX_DEPENDENCY_DEPTH
        ]
        if unknown or too_deep:
            raise _invalid(*unknown, *too_deep)

    def _depth(self, job_id: str) -> int:
        """How deep the job is in its chain: 0 without dependencies, else one more
        than its deepest dependency (bounded by the check above, so is the recursion)."""
        job = self._jobs[job_id]
        return 1 + max((self._depth(d) for d in job.depends_on), default=-1)

    def _wait_for_dependencies(self, job: pb.Job) -> None:
        """A new job with depends_on: waiting for those not COMPLETED (Job.waiting_for),
        or CANCELLED at once if one already failed, as JobService does. The fake passes
        no results on: a TIL or recall runs on the input it was given."""
        for dependency_id in job.depends_on:
            self._dependents.setdefault(dependency_id, []).append(job.id)
        left = [d for d in job.depends_on if self._jobs[d].status != pb.JOB_STATUS_COMPLETED]
        ended = [d for d in left if self._jobs[d].status in TERMINAL_STATUSES]
        if ended:
            self._end_by_dependency(job, self._jobs[ended[0]])
        elif left:
            job.waiting_for.CopyFrom(
                pb.DispatchPause(
                    reason=pb.PAUSE_REASON_DEPENDENCIES, since=job.create_time, job_ids=left
                )
            )

    def _end_by_dependency(self, job: pb.Job, dependency: pb.Job) -> None:
        message = f"Dependency {dependency.id} {_status_name(dependency.status)}"
        job.ClearField("waiting_for")
        job.status = pb.JOB_STATUS_CANCELLED
        job.error_message = job.cancel_reason = message
        job.error_code, job.error_reason = "CANCELLED", "DEPENDENCY_ENDED"
        job.cancel_time.CopyFrom(self._now())

    def _dependency_ended(self, ended: pb.Job) -> None:
        """`ended` reached a terminal status: its waiting dependents run (all their
        dependencies COMPLETED) or are CANCELLED naming it, as JobService's trigger."""
        for job_id in self._dependents.pop(ended.id, []):
            job = self._jobs[job_id]
            if job.status != pb.JOB_STATUS_PENDING or not job.HasField("waiting_for"):
                continue
            if ended.status != pb.JOB_STATUS_COMPLETED:
                self._end_by_dependency(job, ended)
                self._publish(job)  # which ends its own dependents
                continue
            left = [d for d in job.depends_on if self._jobs[d].status != pb.JOB_STATUS_COMPLETED]
            if left:
                job.waiting_for.job_ids[:] = left
                continue
            job.ClearField("waiting_for")
            self._publish(job)
            self._ran(job)

    def _new_job(self, request: pb.EnqueueRequest) -> pb.Job:
        now = self._now()
        job = pb.Job(
            id=str(uuid.uuid4()),
            job_type=request.job_type,
            status=pb.JOB_STATUS_PENDING,
            target_id=request.target_id,
            requested_by=request.requested_by,
            request_id=request.request_id,
            max_attempts=request.max_attempts or DEFAULT_MAX_ATTEMPTS,
        )
        case = str(request.WhichOneof("input"))
        getattr(job, case).CopyFrom(getattr(request, case))
        job.create_time.CopyFrom(now)
        if request.HasField("schedule_time"):
            # Stored and shown as JobService does; the fake does not delay the job.
            job.schedule_time.CopyFrom(request.schedule_time)
        # Kept and shown as JobService does (0: the default 3); the fake runs jobs as
        # they come, so it does not order by it.
        job.priority = request.priority or 3
        job.depends_on.extend(request.depends_on)
        self._jobs[job.id] = job
        if job.depends_on:
            self._wait_for_dependencies(job)
        if request.request_id:
            self._by_request_id[request.request_id] = job.id
        self._publish(job)
        return job

    def batch_enqueue(self, request: pb.BatchEnqueueRequest) -> pb.BatchEnqueueResponse:
        if not 1 <= len(request.requests) <= MAX_BATCH:
            raise _invalid(("requests", f"must hold 1 to {MAX_BATCH} requests"))
        answer = pb.BatchEnqueueResponse()
        for index, item in enumerate(request.requests):
            try:
                answer.results.add(response=self.enqueue(item))
            except JobsError as error:
                if isinstance(error, InvalidRequestError):
                    prefix = f"requests[{index}]."
                    error.field_violations = tuple(
                        FieldViolation(prefix + v.field, v.description)
                        for v in error.field_violations
                    )
                answer.results.add(error=status_from_error(error))
        return answer

    def get_job(self, request: pb.GetJobRequest) -> pb.GetJobResponse:
        with self._lock:
            return pb.GetJobResponse(job=self._known(request.job_id, "job_id"))

    def _known(self, job_id: str, field: str) -> pb.Job:
        if not job_id:
            raise _invalid((field, "is required"))
        if not _is_uuid(job_id):
            raise _invalid((field, f"{job_id[:40]!r} is not a UUID"))
        job = self._jobs.get(job_id)
        if job is None:
            raise _not_found(job_id)
        return job

    def cancel_job(self, request: pb.CancelJobRequest) -> pb.CancelJobResponse:
        with self._lock:
            job = self._known(request.job_id, "job_id")
            if job.status in TERMINAL_STATUSES:
                status = _status_name(job.status)
                raise InvalidJobStateError(
                    f"job {job.id} is {status}; only a PENDING or PROCESSING job can be cancelled",
                    code=grpc.StatusCode.FAILED_PRECONDITION,
                    reason="INVALID_JOB_STATE",
                    metadata={"jobId": job.id, "status": status},
                )
            self._end_attempt(job, "CANCELLED", "", "cancelled")
            job.status = pb.JOB_STATUS_CANCELLED
            job.cancel_reason = request.reason
            job.cancel_time.CopyFrom(self._now())
            return pb.CancelJobResponse(job=as_message(self._publish(job)))

    def list_jobs(self, request: pb.ListJobsRequest) -> pb.ListJobsResponse:
        size = request.page_size or DEFAULT_PAGE_SIZE
        if not 0 < size <= MAX_PAGE_SIZE:
            raise _invalid(("page_size", f"must be between 0 and {MAX_PAGE_SIZE}"))
        token = request.page_token
        if token and not token.isdigit():
            raise _invalid(("page_token", "was not made by this service"))
        start = int(token or 0)
        with self._lock:
            found = [job for job in reversed(self._jobs.values()) if _listed(job, request)]
            more = start + size < len(found)
            return pb.ListJobsResponse(
                jobs=found[start : start + size], next_page_token=str(start + size) if more else ""
            )

    def retry_failed(self, request: pb.RetryFailedRequest) -> pb.RetryFailedResponse:
        criteria = (
            request.job_ids,
            request.job_types,
            request.target_ids,
            request.error_message_contains,
            request.HasField("failed_after"),
            request.HasField("failed_before"),
        )
        if not request.all_failed and not any(criteria):
            raise _invalid(("all_failed", "is required when no other criterion is given"))
        answer = pb.RetryFailedResponse()
        with self._lock:
            matched = [j for j in self._jobs.values() if _retried(j, request)]
            for job in matched[: request.limit or DEFAULT_RETRY_LIMIT]:
                answer.matched_count += 1
                active = self._active(job.job_type, job.target_id)
                if active is not None:
                    answer.skipped.add(job_id=job.id, reason=f"job {active.id} is active")
                    continue
                answer.job_ids.append(job.id)
                if request.dry_run:
                    continue
                answer.retried_count += 1
                job.status = pb.JOB_STATUS_PENDING
                self._publish(job)
                self._ran(job)
        return answer

    def get_job_stats(self, request: pb.GetJobStatsRequest) -> pb.GetJobStatsResponse:
        answer = pb.GetJobStatsResponse()
        with self._lock:
            jobs = list(self._jobs.values())
            counts = Counter((job.job_type, job.status) for job in jobs)
            for (job_type, status), count in sorted(counts.items()):
                answer.counts.add(job_type=job_type, status=status, count=count)
            pending = [job.create_time for job in jobs if job.status == pb.JOB_STATUS_PENDING]
            if pending:
                answer.oldest_pending_create_time.CopyFrom(min(pending, key=_ns))
        return answer

    def _range(self, start: Timestamp, end: Timestamp, given: tuple[bool, bool]) -> tuple[int, int]:
        high = _ns(end) if given[1] else time.time_ns()
        low = _ns(start) if given[0] else high - DAY_NS
        return low, high

    def get_usage(self, request: pb.GetUsageRequest) -> pb.GetUsageResponse:
        given = (request.HasField("start_time"), request.HasField("end_time"))
        low, high = self._range(request.start_time, request.end_time, given)
        totals: dict[tuple[int, str, str], pb.UsageTotal] = {}
        with self._lock:
            for job in self._jobs.values():
                if request.job_types and job.job_type not in request.job_types:
                    continue
                for attempt in job.attempts:
                    if not attempt.HasField("usage") or not low <= _ns(attempt.end_time) < high:
                        continue
                    key = (job.job_type, attempt.usage.model, job.requested_by)
                    total = totals.setdefault(
                        key,
                        pb.UsageTotal(job_type=key[0], model=key[1], requested_by=key[2]),
                    )
                    total.attempts += 1
                    total.cached_attempts += int(attempt.usage.cached)
                    total.input_tokens += attempt.usage.input_tokens
                    total.output_tokens += attempt.usage.output_tokens
                    total.duration.FromNanoseconds(
                        total.duration.ToNanoseconds() + attempt.usage.duration.ToNanoseconds()
                    )
        answer = pb.GetUsageResponse(totals=list(totals.values()))
        answer.start_time.FromNanoseconds(low)
        answer.end_time.FromNanoseconds(high)
        return answer

    def list_failure_groups(
        self, request: pb.ListFailureGroupsRequest
    ) -> pb.ListFailureGroupsResponse:
        given = (request.HasField("failed_after"), request.HasField("failed_before"))
        low, high = self._range(request.failed_after, request.failed_before, given)
        groups: dict[tuple[str, str, str], list[pb.Job]] = {}
        with self._lock:
            for job in self._jobs.values():
                if job.status != pb.JOB_STATUS_FAILED or not low <= _ns(job.fail_time) < high:
                    continue
                if request.job_types and job.job_type not in request.job_types:
                    continue
                prefix = job.error_message[:FAILURE_PREFIX_CHARS]
                groups.setdefault((job.error_code, job.error_reason, prefix), []).append(job)
        answer = pb.ListFailureGroupsResponse(message_prefix_length=FAILURE_PREFIX_CHARS)
        for (code, reason, prefix), members in sorted(groups.items(), key=lambda g: -len(g[1])):
            latest = max(members, key=lambda job: _ns(job.fail_time))
            answer.groups.add(
                error_code=code,
                error_reason=reason,
                message_prefix=prefix,
                count=len(members),
                latest_fail_time=latest.fail_time,
                example_job_id=latest.id,
            )
        answer.failed_after.FromNanoseconds(low)
        answer.failed_before.FromNanoseconds(high)
        return answer

    def prune_jobs(self, request: pb.PruneJobsRequest) -> pb.PruneJobsResponse:
        return pb.PruneJobsResponse(dry_run=request.dry_run)  # no retention: nothing is due

    # -- schedules ------------------------------------------------------------

    @property
    def schedules(self) -> list[pb.Schedule]:
        """Every caller's schedules (copies), by caller then schedule_id."""
        with self._lock:
            return [self._shown(self._schedules[key]) for key in sorted(self._schedules)]

    def fire_schedule(
        self, schedule_id: str, *, period_start: datetime | None = None, caller: str = ""
    ) -> pb.Job | None:
        """Fire one period of a schedule as JobService would: enqueue its template with
        request_id ``schedule:<id>:<period start, RFC 3339 UTC>`` (a period fired twice
        gives the same job) and record it as the last fire; while an earlier period's job
        is still active the period is skipped (counted in skipped_count; None is
        returned), as JobService skips an overlap. ``period_start`` defaults,
        for an interval schedule, to the latest period started by now; a cron schedule
        needs it (the fake reads no crontab). ``caller`` is the token the schedule was
        created with ("" without one). The fake never fires a schedule by itself."""
        with self._lock:
            stored = self._schedule(caller, schedule_id)
            if period_start is None:
                if stored.WhichOneof("period") != "interval":
                    raise ValueError(f"schedule {schedule_id} is a cron one: give period_start")
                start_ns = self._period_start(stored, time.time_ns(), after=False)
            else:
                start_ns = _ns(timestamp(period_start))
            start = Timestamp()
            start.FromNanoseconds(start_ns)
            request = pb.EnqueueRequest()
            request.CopyFrom(stored.template)
            started = start.ToDatetime(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            request.request_id = f"{PERIOD_REQUEST_ID_PREFIX}{schedule_id}:{started}"
            known = self._by_request_id.get(request.request_id)
            if known is None and self._active(request.job_type, request.target_id) is not None:
                stored.skipped_count += 1
                return None
            _check_enqueue(request)
            job = self._enqueue_checked(request).job
            stored.last_fire_time.CopyFrom(start)
            stored.last_job_id = job.id
            return self._copy(self._jobs[job.id])

    def _schedule(self, caller: str, schedule_id: str) -> pb.Schedule:
        if not schedule_id:
            raise _invalid(("schedule_id", "is required"))
        stored = self._schedules.get((caller, schedule_id))
        if stored is None:
            raise ScheduleNotFoundError(
                f"schedule {schedule_id} not found",
                code=grpc.StatusCode.NOT_FOUND,
                reason="SCHEDULE_NOT_FOUND",
                metadata={"scheduleId": schedule_id},
            )
        return stored

    @staticmethod
    def _period_start(schedule: pb.Schedule, now_ns: int, *, after: bool) -> int:
        """An interval schedule's period start: the first after ``now_ns`` (``after``),
        or the latest at or before it. As JobService's, periods start at anchor + k *
        interval, k >= 1, the anchor being create_time cut to the second (request ids
        are written to the second)."""
        anchor = schedule.create_time.seconds * 10**9
        step = schedule.interval.ToNanoseconds()
        periods = max(0, now_ns - anchor) // step
        if after:
            periods += 1
        elif periods < 1:
            raise ValueError(f"no period of schedule {schedule.schedule_id} has started yet")
        return anchor + periods * step

    def _shown(self, schedule: pb.Schedule) -> pb.Schedule:
        """A copy as the service shows it: next_fire_time filled in for an interval
        schedule that is not paused (the fake reads no crontab: unset for cron)."""
        shown = pb.Schedule()
        shown.CopyFrom(schedule)
        if shown.WhichOneof("period") == "interval" and not shown.paused:
            shown.next_fire_time.FromNanoseconds(
                self._period_start(shown, time.time_ns(), after=True)
            )
        return shown

    def create_schedule(
        self, request: pb.CreateScheduleRequest, caller: str = ""
    ) -> pb.CreateScheduleResponse:
        """CreateSchedule as JobService answers it; ``caller`` scopes the id (the token
        the call carried, "" without one)."""
        definition = _schedule_definition(request.schedule)
        with self._lock:
            stored = self._schedules.get((caller, definition.schedule_id))
            if stored is not None:
                if _schedule_definition(stored) != definition:
                    raise ScheduleExistsError(
                        f"schedule {definition.schedule_id} exists with another definition",
                        code=grpc.StatusCode.ALREADY_EXISTS,
                        reason="SCHEDULE_EXISTS",
                        metadata={"scheduleId": definition.schedule_id},
                    )
                return pb.CreateScheduleResponse(schedule=self._shown(stored))
            stored = pb.Schedule()
            stored.CopyFrom(definition)
            stored.paused = request.schedule.paused
            stored.create_time.CopyFrom(self._now())
            stored.requested_by = definition.template.requested_by
            self._schedules[(caller, definition.schedule_id)] = stored
            return pb.CreateScheduleResponse(schedule=self._shown(stored))

    def get_schedule(
        self, request: pb.GetScheduleRequest, caller: str = ""
    ) -> pb.GetScheduleResponse:
        with self._lock:
            stored = self._schedule(caller, request.schedule_id)
            return pb.GetScheduleResponse(schedule=self._shown(stored))

    def list_schedules(
        self, request: pb.ListSchedulesRequest, caller: str = ""
    ) -> pb.ListSchedulesResponse:
        """A page of the caller's schedules by schedule_id; the token is the last id
        of the page before."""
        size = request.page_size or DEFAULT_SCHEDULE_PAGE_SIZE
        if not 0 < size <= MAX_PAGE_SIZE:
            raise _invalid(("page_size", f"must be between 0 and {MAX_PAGE_SIZE}"))
        after = request.page_token
        if after and not after.startswith(_CURSOR_PREFIX):
            raise _invalid(("page_token", "was not made by this service"))
        after = after.removeprefix(_CURSOR_PREFIX)
        with self._lock:
            ids = sorted(sid for who, sid in self._schedules if who == caller and sid > after)
            page = [self._shown(self._schedules[(caller, sid)]) for sid in ids[:size]]
        more = len(ids) > size
        token = f"{_CURSOR_PREFIX}{page[-1].schedule_id}" if more else ""
        return pb.ListSchedulesResponse(schedules=page, next_page_token=token)

    def delete_schedule(
        self, request: pb.DeleteScheduleRequest, caller: str = ""
    ) -> pb.DeleteScheduleResponse:
        with self._lock:
            self._schedule(caller, request.schedule_id)
            del self._schedules[(caller, request.schedule_id)]
        return pb.DeleteScheduleResponse()

    def pause_schedule(
        self, request: pb.PauseScheduleRequest, caller: str = ""
    ) -> pb.PauseScheduleResponse:
        with self._lock:
            stored = self._schedule(caller, request.schedule_id)
            stored.paused = True
            return pb.PauseScheduleResponse(schedule=self._shown(stored))

    def resume_schedule(
        self, request: pb.ResumeScheduleRequest, caller: str = ""
    ) -> pb.ResumeScheduleResponse:
        with self._lock:
            stored = self._schedule(caller, request.schedule_id)
            stored.paused = False
            return pb.ResumeScheduleResponse(schedule=self._shown(stored))

    def _watch(self, request: pb.StreamJobUpdatesRequest, watcher: _Watcher) -> None:
        """Register ``watcher`` and give it the named jobs' current states."""
        for index, job_id in enumerate(request.job_ids):
            if not _is_uuid(job_id):
                raise _invalid((f"job_ids[{index}]", f"{job_id[:40]!r} is not a UUID"))
        with self._lock:
            named = [self._known(job_id, "job_ids") for job_id in request.job_ids]
            self._watchers.append(watcher)
            for job in named:
                watcher.push(self._copy(job))

    def _next_change(
        self, after: int, request: pb.StreamJobChangesRequest
    ) -> tuple[int, pb.Job | None]:
        """The first change after position ``after`` the request wants (its position
        and job), or (the last position, None)."""
        with self._lock:
            for index in range(after, len(self._changes)):
                job = self._changes[index]
                if (not request.job_types or job.job_type in request.job_types) and (
                    not request.statuses or job.status in request.statuses
                ):
                    return index + 1, self._copy(job)
            return len(self._changes), None

    def _follow_changes(self, signal: _Signal) -> None:
        with self._lock:
            self._change_streams.append(signal)

    def _unfollow_changes(self, signal: _Signal) -> None:
        with self._lock:
            if signal in self._change_streams:
                self._change_streams.remove(signal)

    def _unwatch(self, watcher: _Watcher) -> None:
        with self._lock:
            if watcher in self._watchers:
                self._watchers.remove(watcher)


def _result_field(job: pb.Job, job_result: Message) -> str:
    """The result field of ``job`` that ``job_result`` goes in; TypeError for a
    message of another type."""
    info = job_type_info(job.job_type)
    if info is None or not isinstance(job_result, info.result_type):
        expected = "no result" if info is None else info.result_type.__name__
        raise TypeError(f"job {job.id} takes {expected}, not {type(job_result).__name__}")
    return info.result_field


def _check_enqueue(request: pb.EnqueueRequest) -> None:
    """The request's shape as JobService checks it (not the inputs' contents)."""
    violations: list[tuple[str, str]] = []
    if not request.target_id.strip():
        violations.append(("target_id", "is required and must not be blank"))
    for field in ("target_id", "request_id", "requested_by"):
        value = getattr(request, field)
        if len(value) > MAX_TEXT_FIELD_CHARS or not value.isprintable():
            violations.append(
                (field, f"must be at most {MAX_TEXT_FIELD_CHARS} printable characters")
            )
    if not 0 <= request.max_attempts <= MAX_ATTEMPTS_LIMIT:
        violations.append(
            ("max_attempts", f"must be between 1 and {MAX_ATTEMPTS_LIMIT} (0 means the default)")
        )
    if not 0 <= request.priority <= 5:
        violations.append(("priority", "must be 1 (most urgent) to 5, or 0 for the default"))
    if len(request.depends_on) > MAX_DEPENDENCIES:
        violations.append(("depends_on", f"must hold at most {MAX_DEPENDENCIES} job ids"))
    for index, job_id in enumerate(request.depends_on):
        if job_id in request.depends_on[:index]:
            violations.append((f"depends_on[{index}]", "repeats an earlier id"))
    info = job_type_info(request.job_type)
    case = request.WhichOneof("input")
    if info is None:
        known = ", ".join(f"JOB_TYPE_{i.name}" for i in JOB_TYPES)
        violations.append(("job_type", f"is required: one of {known}"))
    elif case is None:
        violations.append((info.input_field, f"is required for {info.name} jobs"))
    elif case != info.input_field:
        violations.append(
            (case, f"does not match job_type {info.name}; set {info.input_field} instead")
        )
    if violations:
        raise _invalid(*violations)


def _schedule_definition(schedule: pb.Schedule) -> pb.Schedule:
    """The schedule's definition (its output-only fields and ``paused`` cleared),
    checked as JobService checks it; InvalidRequestError naming each bad field."""
    violations: list[tuple[str, str]] = []
    if not _SCHEDULE_ID.fullmatch(schedule.schedule_id):
        violations.append(
            ("schedule.schedule_id", "must be 1 to 128 letters, digits, '.', '_', '-' or ':'")
        )
    violations.extend(_period_violations(schedule))
    seconds = schedule.catchup_window.ToNanoseconds() / 1e9
    if not 0 <= seconds <= MAX_SPAN_SECONDS:
        violations.append(("schedule.catchup_window", "must be between 0 and 366 days"))
    if schedule.HasField("template"):
        violations.extend(_template_violations(schedule.template))
    else:
        violations.append(("schedule.template", "is required"))
    if violations:
        raise _invalid(*violations)
    definition = pb.Schedule()
    definition.CopyFrom(schedule)
    # The output-only fields (a create call's are ignored).
    definition.ClearField("next_fire_time")
    definition.ClearField("last_fire_time")
    definition.ClearField("last_job_id")
    definition.ClearField("skipped_count")
    definition.ClearField("create_time")
    definition.ClearField("requested_by")
    definition.paused = False
    return definition


def _period_violations(schedule: pb.Schedule) -> list[tuple[str, str]]:
    """Exactly one of cron (five fields; the fake reads no further) or interval, and a
    time zone only with cron; JobService's words."""
    violations: list[tuple[str, str]] = []
    period = schedule.WhichOneof("period")
    if period is None:
        violations.append(("schedule.cron", "give exactly one of cron or interval"))
    elif len(schedule.cron) > MAX_CRON_CHARS:
        violations.append(("schedule.cron", f"at most {MAX_CRON_CHARS} characters"))
    elif period == "cron" and len(schedule.cron.split()) != CRON_FIELDS:
        fields = "minute hour day-of-month month day-of-week"
        violations.append(("schedule.cron", f"must be five fields: {fields}"))
    elif period == "interval" and not (
        MIN_INTERVAL_SECONDS <= schedule.interval.ToNanoseconds() / 1e9 <= MAX_SPAN_SECONDS
    ):
        violations.append(("schedule.interval", "must be at least 1 s and at most 366 days"))
    elif period == "interval" and schedule.interval.nanos:
        # A period's start is its job's request_id, written to the second.
        violations.append(("schedule.interval", "must be a whole number of seconds"))
    if schedule.time_zone:
        if period != "cron":
            violations.append(("schedule.time_zone", "only with cron"))
        elif not _is_time_zone(schedule.time_zone):
            unknown = f"unknown time zone {schedule.time_zone[:64]!r} (an IANA name)"
            violations.append(("schedule.time_zone", unknown))
    return violations


def _template_violations(template: pb.EnqueueRequest) -> list[tuple[str, str]]:
    """The template checked as Enqueue checks a request, named schedule.template.*."""
    violations: list[tuple[str, str]] = []
    if template.request_id:
        violations.append(("schedule.template.request_id", "must be empty: the schedule sets it"))
    if template.HasField("schedule_time"):
        violations.append(("schedule.template.schedule_time", "must be unset"))
    if template.depends_on:
        violations.append(
            ("schedule.template.depends_on", "must be empty: periods cannot wait for other jobs")
        )
    try:
        _check_enqueue(template)
    except InvalidRequestError as error:
        violations.extend(
            (f"schedule.template.{v.field}", v.description)
            for v in error.field_violations
            if v.field != "request_id" and not v.field.startswith("depends_on")  # named above
        )
    return violations


def _is_time_zone(name: str) -> bool:
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return False
    return True


def _caller(metadata: Iterable[tuple[str, str]]) -> str:
    """The token a call carried ("" without one): it scopes schedule ids, as the
    server's caller does."""
    for key, value in metadata or ():
        if key == "authorization":
            return str(value).removeprefix("Bearer ")
    return ""


def _response(job: pb.Job, *, deduplicated: bool) -> pb.EnqueueResponse:
    """Enqueue's answer: the job without its input."""
    answer = pb.EnqueueResponse(job=job, deduplicated=deduplicated)
    case = job.WhichOneof("input")
    if case is not None:
        answer.job.ClearField(case)
    return answer


def _listed(job: pb.Job, request: pb.ListJobsRequest) -> bool:
    return (
        (not request.statuses or job.status in request.statuses)
        and (not request.job_types or job.job_type in request.job_types)
        and (not request.target_id or job.target_id == request.target_id)
        and request.error_message_contains in job.error_message
        and (
            not request.HasField("created_after")
            or _ns(job.create_time) >= _ns(request.created_after)
        )
        and (
            not request.HasField("created_before")
            or _ns(job.create_time) < _ns(request.created_before)
        )
    )


def _retried(job: pb.Job, request: pb.RetryFailedRequest) -> bool:
    return (
        job.status == pb.JOB_STATUS_FAILED
        and (not request.job_ids or job.id in request.job_ids)
        and (not request.job_types or job.job_type in request.job_types)
        and (not request.target_ids or job.target_id in request.target_ids)
        and request.error_message_contains in job.error_message
        and (
            not request.HasField("failed_after") or _ns(job.fail_time) >= _ns(request.failed_after)
        )
        and (
            not request.HasField("failed_before") or _ns(job.fail_time) < _ns(request.failed_before)
        )
    )


class _Watcher:
    """One open StreamJobUpdates: the states it is owed, in a queue of its loop."""

    def __init__(self, request: pb.StreamJobUpdatesRequest) -> None:
        self._loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self._open = set(request.job_ids)
        self._feed = not request.job_ids
        self._types = set(request.job_types)
        self._statuses = set(request.statuses)

    def hears(self, job: pb.Job) -> bool:
        if not self._feed:
            return job.id in self._open
        return (not self._types or job.job_type in self._types) and (
            not self._statuses or job.status in self._statuses
        )

    def push(self, item: Any) -> bool:
        """Queue ``item`` (a job's state, or the error ending the stream) from any
        thread; after a named job's terminal state, the end once all are. False when
        the stream's loop is gone."""
        items = [item]
        if isinstance(item, pb.Job) and not self._feed and item.status in TERMINAL_STATUSES:
            self._open.discard(item.id)
            if not self._open:
                items.append(_END)
        try:
            for each in items:
                self._loop.call_soon_threadsafe(self.queue.put_nowait, each)
        except RuntimeError:  # the loop is closed
            return False
        return True


class _FakeCall:
    """A server-streaming call of the fake, read with ``async for`` as grpc.aio's is:
    ``_next`` gives each message, a JobsError ends the call as the RPC's error."""

    def __init__(self, service: FakeJobService, request: Any, timeout: float | None) -> None:
        self._service = service
        self._request = request
        self._timeout = timeout
        self._deadline: float | None = None
        self._done = False

    def __aiter__(self) -> _FakeCall:
        return self

    async def __anext__(self) -> Any:
        if self._done:
            raise StopAsyncIteration
        try:
            return await self._next()
        except JobsError as error:
            self.cancel()
            raise rpc_error_from(error) from None

    async def _next(self) -> Any:
        raise NotImplementedError

    def _start_deadline(self) -> None:
        loop = asyncio.get_running_loop()
        self._deadline = None if self._timeout is None else loop.time() + self._timeout

    async def _take(self, queue: asyncio.Queue[Any]) -> Any:
        """The next item of ``queue``, raising the error it may be; DEADLINE_EXCEEDED
        past the call's timeout."""
        left = None
        if self._deadline is not None:
            left = max(0.0, self._deadline - asyncio.get_running_loop().time())
        try:
            item = await asyncio.wait_for(queue.get(), left)
        except TimeoutError:
            raise ServiceUnavailableError(
                "Deadline Exceeded", code=grpc.StatusCode.DEADLINE_EXCEEDED
            ) from None
        if isinstance(item, JobsError):
            raise item
        return item

    def cancel(self) -> bool:
        self._done = True
        return True


class _Stream(_FakeCall):
    """A StreamJobUpdates call of the fake."""

    _watcher: _Watcher | None = None

    async def _next(self) -> pb.StreamJobUpdatesResponse:
        if self._watcher is None:
            self._start_deadline()
            self._watcher = _Watcher(self._request)
            self._service._watch(self._request, self._watcher)
        item = await self._take(self._watcher.queue)
        if item is _END:
            self.cancel()
            raise StopAsyncIteration
        return pb.StreamJobUpdatesResponse(job=as_message(item))

    def cancel(self) -> bool:
        if self._watcher is not None:
            self._service._unwatch(self._watcher)
        return super().cancel()


_MOVED = object()
_CURSOR_PREFIX = "fake."


class _Signal:
    """A StreamJobChanges' wake-up (or the error ending it), from any thread."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[Any] = asyncio.Queue()

    def push(self, item: Any) -> bool:
        try:
            self._loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the loop is closed
            return False
        return True


class _ChangeStream(_FakeCall):
    """A StreamJobChanges call of the fake: the changes after its cursor, then live."""

    _signal: _Signal | None = None
    _position = 0

    async def _next(self) -> pb.StreamJobChangesResponse:
        if self._signal is None:
            self._position = _fake_position(self._request.after_cursor)
            self._start_deadline()
            self._signal = _Signal()
            self._service._follow_changes(self._signal)
        while True:
            self._position, job = self._service._next_change(self._position, self._request)
            if job is not None:
                cursor = f"{_CURSOR_PREFIX}{self._position}"
                return pb.StreamJobChangesResponse(cursor=cursor, job=as_message(job))
            await self._take(self._signal.queue)  # a change was made, or the error

    def cancel(self) -> bool:
        if self._signal is not None:
            self._service._unfollow_changes(self._signal)
        return super().cancel()


def _fake_position(cursor: str) -> int:
    """The position of one of the fake's cursors ("" = the start); InvalidRequestError
    naming after_cursor for anything else, as JobService answers."""
    if not cursor:
        return 0
    digits = cursor.removeprefix(_CURSOR_PREFIX)
    if not cursor.startswith(_CURSOR_PREFIX) or not digits.isdigit():
        raise _invalid(("after_cursor", "not a cursor of this service"))
    return int(digits)


class _FakeStub:
    """JobService's stub over the fake: what AsyncJobsClient calls (see _transport)."""

    def __init__(self, service: FakeJobService) -> None:
        self._service = service
        handlers: dict[str, Callable[[Any], Message]] = {
            "Enqueue": service.enqueue,
            "BatchEnqueue": service.batch_enqueue,
            "GetJob": service.get_job,
            "RetryFailed": service.retry_failed,
            "ListJobs": service.list_jobs,
            "CancelJob": service.cancel_job,
            "GetJobStats": service.get_job_stats,
            "GetUsage": service.get_usage,
            "ListFailureGroups": service.list_failure_groups,
            "PruneJobs": service.prune_jobs,
        }
        # Schedules are the caller's own: these handlers hear whose call it is.
        scoped: dict[str, Callable[[Any, str], Message]] = {
            "CreateSchedule": service.create_schedule,
            "GetSchedule": service.get_schedule,
            "ListSchedules": service.list_schedules,
            "DeleteSchedule": service.delete_schedule,
            "PauseSchedule": service.pause_schedule,
            "ResumeSchedule": service.resume_schedule,
        }
        for method in SERVICE.methods:
            if method.server_streaming:
                continue
            if method.name in scoped:
                handler = _scoped(service, method.name, scoped[method.name])
            else:
                handler = _unary(service, method.name, handlers[method.name])
            setattr(self, method.name, handler)

    def StreamJobUpdates(
        self,
        request: pb.StreamJobUpdatesRequest,
        timeout: float | None = None,
        metadata: Iterable[tuple[str, str]] = (),
    ) -> Any:
        try:
            self._service._answer("StreamJobUpdates", request, metadata)
        except JobsError as error:
            return _Failed(error)
        return _Stream(self._service, request, timeout)

    def StreamJobChanges(
        self,
        request: pb.StreamJobChangesRequest,
        timeout: float | None = None,
        metadata: Iterable[tuple[str, str]] = (),
    ) -> Any:
        try:
            self._service._answer("StreamJobChanges", request, metadata)
            _fake_position(request.after_cursor)
        except JobsError as error:
            return _Failed(error)
        return _ChangeStream(self._service, request, timeout)


class _Failed:
    """A stream call that fails at its first read."""

    def __init__(self, error: JobsError) -> None:
        self._error = error

    def __aiter__(self) -> _Failed:
        return self

    async def __anext__(self) -> Any:
        raise rpc_error_from(self._error)

    def cancel(self) -> bool:
        return True


def _unary(
    service: FakeJobService, rpc: str, handler: Callable[[Any], Message]
) -> Callable[..., Any]:
    async def call(request: Message, **options: Any) -> Message:
        try:
            service._answer(rpc, request, options.get("metadata") or ())
            return handler(request)
        except JobsError as error:
            raise rpc_error_from(error) from None

    return call


def _scoped(
    service: FakeJobService, rpc: str, handler: Callable[[Any, str], Message]
) -> Callable[..., Any]:
    """A unary call whose handler also takes the caller (see :func:`_caller`)."""

    async def call(request: Message, **options: Any) -> Message:
        metadata = options.get("metadata") or ()
        try:
            service._answer(rpc, request, metadata)
            return handler(request, _caller(metadata))
        except JobsError as error:
            raise rpc_error_from(error) from None

    return call
