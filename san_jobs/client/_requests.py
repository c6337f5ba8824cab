"""Request building and the watch's bookkeeping of the client (no I/O here)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta

import grpc
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from san_jobs.client._errors import WaitTimeoutError
from san_jobs.client._job_types import job_type_of_input
from san_jobs.client._names import JobStatus
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

JobInput = Message
"""A job's input: a message of EnqueueRequest's `input` oneof (CardAnalysisInput,
TilGenerationInput, ...; the contract's list, see _job_types.py). Any message is
accepted by the type checker; enqueue() refuses any other with TypeError."""

TERMINAL_STATUSES: frozenset[pb.JobStatus.ValueType] = frozenset(
    {JobStatus.JOB_STATUS_COMPLETED, JobStatus.JOB_STATUS_FAILED, JobStatus.JOB_STATUS_CANCELLED}
)


def is_terminal(job: pb.Job) -> bool:
    """True when the job is COMPLETED, FAILED or CANCELLED."""
    return job.status in TERMINAL_STATUSES


def timestamp(value: datetime) -> Timestamp:
    """A protobuf Timestamp from an aware datetime (a naive one is taken as UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    stamp = Timestamp()
    stamp.FromDatetime(value.astimezone(UTC))
    return stamp


def enqueue_request(
    target_id: str,
    job_input: JobInput,
    *,
    job_type: pb.JobType.ValueType | None,
    requested_by: str,
    request_id: str | None,
    max_attempts: int,
    return_existing: bool,
    schedule_time: datetime | None = None,
    priority: int = 0,
    depends_on: Sequence[str] = (),
) -> pb.EnqueueRequest:
    """An EnqueueRequest; `schedule_time` (aware, or naive taken as UTC) delays the
    job until then (at most a year ahead; a past time means now); `priority` 1 (most
    urgent) to 5, 0 for the default 3; `depends_on` the ids of jobs it runs after."""
    request = pb.EnqueueRequest(
        target_id=target_id,
        requested_by=requested_by,
        # Always an idempotency key, so that the channel's automatic retry of an
        # UNAVAILABLE Enqueue can never store the job twice.
        request_id=request_id or str(uuid.uuid4()),
        max_attempts=max_attempts,
        priority=priority,
        depends_on=list(depends_on),
        on_duplicate=(
            pb.ON_DUPLICATE_RETURN_EXISTING if return_existing else pb.ON_DUPLICATE_REJECT
        ),
    )
    info = job_type_of_input(job_input)  # TypeError for a message that is no input
    getattr(request, info.input_field).CopyFrom(job_input)
    request.job_type = info.value if job_type is None else job_type
    if schedule_time is not None:
        request.schedule_time.CopyFrom(timestamp(schedule_time))
    return request


def list_jobs_request(
    *,
    statuses: Iterable[pb.JobStatus.ValueType],
    job_types: Iterable[pb.JobType.ValueType],
    target_id: str,
    error_message_contains: str,
    created_after: datetime | None,
    created_before: datetime | None,
    page_size: int,
    page_token: str,
) -> pb.ListJobsRequest:
    request = pb.ListJobsRequest(
        statuses=list(statuses),
        job_types=list(job_types),
        target_id=target_id,
        error_message_contains=error_message_contains,
        page_size=page_size,
        page_token=page_token,
    )
    if created_after is not None:
        request.created_after.CopyFrom(timestamp(created_after))
    if created_before is not None:
        request.created_before.CopyFrom(timestamp(created_before))
    return request


def usage_request(
    start_time: datetime | None,
    end_time: datetime | None,
    job_types: Iterable[pb.JobType.ValueType],
) -> pb.GetUsageRequest:
    """GetUsage's request; an unset end is the server's now, an unset start a day
    before the end."""
    request = pb.GetUsageRequest(job_types=list(job_types))
    if start_time is not None:
        request.start_time.CopyFrom(timestamp(start_time))
    if end_time is not None:
        request.end_time.CopyFrom(timestamp(end_time))
    return request


def failure_groups_request(
    failed_after: datetime | None,
    failed_before: datetime | None,
    job_types: Iterable[pb.JobType.ValueType],
) -> pb.ListFailureGroupsRequest:
    """ListFailureGroups' request; an unset end is the server's now, an unset start a
    day before the end."""
    request = pb.ListFailureGroupsRequest(job_types=list(job_types))
    if failed_after is not None:
        request.failed_after.CopyFrom(timestamp(failed_after))
    if failed_before is not None:
        request.failed_before.CopyFrom(timestamp(failed_before))
    return request


def stream_job_changes_request(
    after_cursor: str,
    *,
    job_types: Iterable[pb.JobType.ValueType],
    statuses: Iterable[pb.JobStatus.ValueType],
) -> pb.StreamJobChangesRequest:
    return pb.StreamJobChangesRequest(
        after_cursor=after_cursor, job_types=list(job_types), statuses=list(statuses)
    )


def retry_failed_request(
    *,
    job_ids: Iterable[str],
    job_types: Iterable[pb.JobType.ValueType],
    target_ids: Iterable[str],
    error_message_contains: str,
    failed_after: datetime | None,
    failed_before: datetime | None,
    all_failed: bool,
    limit: int,
    dry_run: bool,
    requested_by: str,
) -> pb.RetryFailedRequest:
    request = pb.RetryFailedRequest(
        job_ids=list(job_ids),
        job_types=list(job_types),
        target_ids=list(target_ids),
        error_message_contains=error_message_contains,
        all_failed=all_failed,
        limit=limit,
        dry_run=dry_run,
        requested_by=requested_by,
    )
    if failed_after is not None:
        request.failed_after.CopyFrom(timestamp(failed_after))
    if failed_before is not None:
        request.failed_before.CopyFrom(timestamp(failed_before))
    return request


class ChangeFilter:
    """Lets through only observations of a job that differ from the last one let through.

    The stream and the polling fallback may both report the same state; a watcher
    should see each state once. A PENDING job's `waiting_for` is part of its state:
    the server sends the job again when the pause of its type opens or closes.
    """

    def __init__(self) -> None:
        self._last: tuple[object, ...] | None = None

    def is_new(self, job: pb.Job) -> bool:
        key = (
            job.status,
            job.attempt_count,
            job.update_time.seconds,
            job.update_time.nanos,
            job.error_message,
            # A PENDING job's pause opening or closing changes no other field.
            job.waiting_for.SerializeToString(deterministic=True),
        )
        if key == self._last:
            return False
        self._last = key
        return True


class Deadline:
    """The time left to watch a job; raises WaitTimeoutError once it is used up."""

    def __init__(self, job_id: str, timeout: float | None) -> None:
        self._job_id = job_id
        self._timeout = timeout
        self._end = None if timeout is None else time.monotonic() + timeout

    def remaining(self) -> float | None:
        """Seconds left (None without a timeout); raises once none are left."""
        if self._end is None:
            return None
        left = self._end - time.monotonic()
        if left <= 0:
            raise WaitTimeoutError(
                f"job {self._job_id} was not finished after {self._timeout:g}s",
                code=grpc.StatusCode.DEADLINE_EXCEEDED,
            )
        return left

    def cap(self, seconds: float) -> float:
        """``seconds``, or less if the deadline comes sooner."""
        left = self.remaining()
        return seconds if left is None else min(seconds, left)


def duration(value: timedelta) -> Duration:
    """A protobuf Duration from a timedelta."""
    stamp = Duration()
    stamp.FromTimedelta(value)
    return stamp


def schedule_message(
    schedule_id: str,
    target_id: str,
    job_input: JobInput,
    *,
    cron: str | None,
    time_zone: str,
    interval: timedelta | None,
    catchup_window: timedelta | None,
    paused: bool,
    job_type: pb.JobType.ValueType | None,
    requested_by: str,
    max_attempts: int,
    priority: int,
) -> pb.Schedule:
    """A Schedule for CreateSchedule: its template is the EnqueueRequest enqueue()
    would send, without request_id (each period's job gets the schedule's). Exactly
    one of ``cron`` and ``interval`` (ValueError otherwise: a caller's mistake, caught
    before the call)."""
    if (cron is None) == (interval is None):
        raise ValueError("a schedule takes exactly one of cron and interval")
    template = enqueue_request(
        target_id,
        job_input,
        job_type=job_type,
        requested_by=requested_by,
        request_id=None,
        max_attempts=max_attempts,
        return_existing=False,
    )
    template.request_id = ""  # the schedule sets it, per period
    template.priority = priority
    schedule = pb.Schedule(
        schedule_id=schedule_id, template=template, time_zone=time_zone, paused=paused
    )
    if cron is not None:
        schedule.cron = cron
    if interval is not None:
        schedule.interval.CopyFrom(duration(interval))
    if catchup_window is not None:
        schedule.catchup_window.CopyFrom(duration(catchup_window))
    return schedule
