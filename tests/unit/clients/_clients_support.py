"""Helpers shared by the clients' unit tests: rich statuses and job builders."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

DETAILS_KEY = "grpc-status-details-bin"


def rich_trailers(
    code: grpc.StatusCode, message: str, *details: object
) -> tuple[tuple[str, bytes], ...]:
    """Trailing metadata carrying a google.rpc.Status with the given detail messages."""
    status = status_pb2.Status(code=code.value[0], message=message)
    for detail in details:
        packed = any_pb2.Any()
        packed.Pack(detail)
        status.details.append(packed)
    return ((DETAILS_KEY, status.SerializeToString()),)


def error_info(reason: str, **metadata: str) -> error_details_pb2.ErrorInfo:
    return error_details_pb2.ErrorInfo(reason=reason, domain="jobs.san", metadata=metadata)


def bad_request(*violations: tuple[str, str]) -> error_details_pb2.BadRequest:
    return error_details_pb2.BadRequest(
        field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=f, description=d)
            for f, d in violations
        ]
    )


def retry_info(seconds: float) -> error_details_pb2.RetryInfo:
    delay = duration_pb2.Duration()
    delay.FromNanoseconds(int(seconds * 1e9))
    return error_details_pb2.RetryInfo(retry_delay=delay)


def make_job(
    status: pb.JobStatus.ValueType = pb.JOB_STATUS_PENDING,
    *,
    job_id: str | None = None,
    attempt: int = 0,
    error: str = "",
    summary: str = "",
    tags: Sequence[str] = (),
    target_id: str = "scrap-1",
    update_seconds: int = 1_700_000_000,
) -> pb.Job:
    job = pb.Job(
        id=job_id or str(uuid.uuid4()),
        job_type=pb.JOB_TYPE_CARD_ANALYSIS,
        status=status,
        target_id=target_id,
        attempt_count=attempt,
        max_attempts=3,
        error_message=error,
        card_analysis_input=pb.CardAnalysisInput(text="some text"),
    )
    job.create_time.FromSeconds(1_700_000_000)
    job.update_time.FromSeconds(update_seconds)
    if status == pb.JOB_STATUS_COMPLETED:
        job.card_analysis_result.summary = summary or "A summary."
        job.card_analysis_result.tags.extend(tags or ["tag"])
    return job
