"""convert.fill_fresh_job, BatchEnqueue's answer for a job just inserted: the same
bytes as job_to_pb(job, with_input=False), and no answer at all for any other job."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from san_jobs.job_service.domain.model import JobAttempt, JobStatus, JobType, NewJob
from san_jobs.job_service.storage.rows import pending_job
from san_jobs.job_service.transport.convert import fill_fresh_job, job_to_pb, timestamp_of
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

NOW = datetime(2026, 12, 1, 18, 19, 32, 123456, tzinfo=UTC)


def _new(**changes: Any) -> NewJob:
    new = NewJob(
        job_type=JobType.CARD_ANALYSIS,
        target_id="scrap-1",
        request_params={"text": "카드"},
        requested_by="",
        request_id=None,
        max_attempts=3,
    )
    return dataclasses.replace(new, **changes)


@pytest.mark.parametrize(
    "new",
    [
        _new(),
        _new(requested_by="alice", request_id="req-1"),
        _new(job_type=JobType.TIL_GENERATION, target_id="사용자-7", max_attempts=1),
        _new(traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
    ],
)
def test_same_bytes_as_job_to_pb(new: NewJob) -> None:
    job = pending_job("0190b1c2-1234-7abc-8def-0123456789ab", new, NOW)
    message = pb.Job()
    assert fill_fresh_job(message, job, timestamp_of(job.created_at))
    expected = job_to_pb(job, with_input=False)
    assert message.SerializeToString(deterministic=True) == expected.SerializeToString(
        deterministic=True
    )
    assert message == expected


LATER = NOW + timedelta(seconds=1)
ATTEMPT = JobAttempt(attempt=1, start_time=NOW, end_time=LATER, error_code="X")


@pytest.mark.parametrize(
    "changes",
    [
        {"status": JobStatus.PROCESSING},
        {"status": JobStatus.COMPLETED, "result": {"summary": "s"}, "completed_at": LATER},
        {"attempt_count": 1},
        {"updated_at": LATER},
        {"error_message": "boom"},
        {"error_code": "INTERNAL"},
        {"error_reason": "R"},
        {"cancel_reason": "no"},
        {"started_at": LATER},
        {"failed_at": LATER},
        {"next_attempt_at": LATER},
        {"cancelled_at": LATER},
        {"result": {"summary": "s"}},
        {"attempts": (ATTEMPT,)},
    ],
)
def test_any_other_job_is_left_to_job_to_pb(changes: dict[str, Any]) -> None:
    job = dataclasses.replace(pending_job("0190-x", _new(), NOW), **changes)
    message = pb.Job()
    assert not fill_fresh_job(message, job, timestamp_of(job.created_at))
    assert message == pb.Job()
