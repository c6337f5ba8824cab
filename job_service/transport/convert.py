"""Protobuf <-> domain conversion. Protobuf messages never go past the servicer."""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf import json_format
from google.protobuf.timestamp_pb2 import Timestamp
from san.jobs.v1 import job_service_pb2 as pb

from job_service.domain.model import Job, JobAttempt, JobStats, JobStatus, JobType
from job_service.domain.validation import INPUT_CASE_BY_TYPE, RESULT_CASE_BY_TYPE

JOB_TYPE_TO_PB: dict[JobType, pb.JobType.ValueType] = {
    JobType.CARD_ANALYSIS: pb.JOB_TYPE_CARD_ANALYSIS,
    JobType.TIL_GENERATION: pb.JOB_TYPE_TIL_GENERATION,
    JobType.RECALL_GENERATION: pb.JOB_TYPE_RECALL_GENERATION,
}
JOB_TYPE_FROM_PB = {v: k for k, v in JOB_TYPE_TO_PB.items()}

STATUS_TO_PB: dict[JobStatus, pb.JobStatus.ValueType] = {
    JobStatus.PENDING: pb.JOB_STATUS_PENDING,
    JobStatus.PROCESSING: pb.JOB_STATUS_PROCESSING,
    JobStatus.COMPLETED: pb.JOB_STATUS_COMPLETED,
    JobStatus.FAILED: pb.JOB_STATUS_FAILED,
    JobStatus.CANCELLED: pb.JOB_STATUS_CANCELLED,
}
STATUS_FROM_PB = {v: k for k, v in STATUS_TO_PB.items()}


def timestamp(value: datetime | None) -> Timestamp | None:
    if value is None:
        return None
    ts = Timestamp()
    ts.FromDatetime(value.astimezone(UTC))
    return ts


def from_timestamp(message: Timestamp) -> datetime:
    return message.ToDatetime(tzinfo=UTC)


def job_to_pb(job: Job) -> pb.Job:
    message = pb.Job(
        id=job.id,
        job_type=JOB_TYPE_TO_PB[job.job_type],
        status=STATUS_TO_PB[job.status],
        target_id=job.target_id,
        requested_by=job.requested_by,
        request_id=job.request_id or "",
        error_message=job.error_message or "",
        error_code=job.error_code or "",
        error_reason=job.error_reason or "",
        attempt_count=job.attempt_count,
        max_attempts=job.max_attempts,
        cancel_reason=job.cancel_reason or "",
        attempts=[attempt_to_pb(a) for a in job.attempts],
    )
    json_format.ParseDict(
        job.request_params,
        getattr(message, INPUT_CASE_BY_TYPE[job.job_type]),
        ignore_unknown_fields=True,
    )
    if job.result is not None:
        json_format.ParseDict(
            job.result,
            getattr(message, RESULT_CASE_BY_TYPE[job.job_type]),
            ignore_unknown_fields=True,
        )
    for name, value in (
        ("create_time", job.created_at),
        ("update_time", job.updated_at),
        ("start_time", job.started_at),
        ("complete_time", job.completed_at),
        ("fail_time", job.failed_at),
        ("next_attempt_time", job.next_attempt_at),
        ("cancel_time", job.cancelled_at),
    ):
        ts = timestamp(value)
        if ts is not None:
            getattr(message, name).CopyFrom(ts)
    return message


def attempt_to_pb(attempt: JobAttempt) -> pb.JobAttempt:
    message = pb.JobAttempt(
        attempt=attempt.attempt,
        error_code=attempt.error_code,
        error_reason=attempt.error_reason,
        error_message=attempt.error_message,
    )
    message.start_time.FromDatetime(attempt.start_time.astimezone(UTC))
    if attempt.end_time is not None:
        message.end_time.FromDatetime(attempt.end_time.astimezone(UTC))
    return message


def stats_to_pb(stats: JobStats) -> pb.GetJobStatsResponse:
    response = pb.GetJobStatsResponse(
        counts=[
            pb.JobCount(
                job_type=JOB_TYPE_TO_PB[c.job_type], status=STATUS_TO_PB[c.status], count=c.count
            )
            for c in stats.counts
        ]
    )
    ts = timestamp(stats.oldest_pending_created_at)
    if ts is not None:
        response.oldest_pending_create_time.CopyFrom(ts)
    return response
