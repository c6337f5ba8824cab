"""san-web's mapping of JobService errors to HTTP, and its job JSON."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest
from _clients_support import make_job

from san_jobs.client import (
    DuplicateJobError,
    FieldViolation,
    InvalidJobStateError,
    InvalidRequestError,
    JobNotFoundError,
    JobsError,
    RateLimitedError,
    ServiceUnavailableError,
)
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.web.app import job_view, jobs_error_response


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (DuplicateJobError("dup", code=grpc.StatusCode.ALREADY_EXISTS), 409),
        (InvalidJobStateError("done", code=grpc.StatusCode.FAILED_PRECONDITION), 409),
        (JobNotFoundError("gone", code=grpc.StatusCode.NOT_FOUND), 404),
        (InvalidRequestError("bad", code=grpc.StatusCode.INVALID_ARGUMENT), 422),
        (RateLimitedError("slow", code=grpc.StatusCode.RESOURCE_EXHAUSTED, retry_delay=1.5), 429),
        (ServiceUnavailableError("down", code=grpc.StatusCode.UNAVAILABLE), 503),
        (JobsError("boom", code=grpc.StatusCode.INTERNAL), 502),
    ],
)
def test_status_per_error(error: JobsError, status: int) -> None:
    response = jobs_error_response(error)
    assert response.status_code == status
    body = json.loads(bytes(response.body))
    assert body["error"]["code"] == error.code.name
    if status == 429:
        assert response.headers["Retry-After"] == "2"


@pytest.mark.parametrize(
    ("error", "status", "message"),
    [
        (
            ServiceUnavailableError(
                "failed to connect to all addresses; last error: UNKNOWN: "
                "ipv4:10.0.0.7:50051: Failed to connect to remote host: Connection refused",
                code=grpc.StatusCode.UNAVAILABLE,
            ),
            503,
            "JobService is unavailable; try again later",
        ),
        (
            ServiceUnavailableError(
                "database unavailable: UntranslatableCharacterError: postgresql://svc@db",
                code=grpc.StatusCode.UNAVAILABLE,
            ),
            503,
            "JobService is unavailable; try again later",
        ),
        (
            JobsError(
                'Exception calling application: File "/srv/x.py"', code=grpc.StatusCode.UNKNOWN
            ),
            502,
            "JobService failed to answer this request",
        ),
    ],
)
def test_unavailable_and_failed_answers_hold_no_internals(
    error: JobsError, status: int, message: str, caplog: pytest.LogCaptureFixture
) -> None:
    detail = error.message
    with caplog.at_level("WARNING", logger="san_web"):
        response = jobs_error_response(error)
    assert response.status_code == status
    assert json.loads(bytes(response.body))["error"]["message"] == message
    assert repr(detail) in caplog.text  # the details stay in the log


def test_duplicate_and_invalid_bodies() -> None:
    duplicate = DuplicateJobError(
        "dup", code=grpc.StatusCode.ALREADY_EXISTS, metadata={"existingJobId": "j1"}
    )
    assert json.loads(bytes(jobs_error_response(duplicate).body))["error"]["existingJobId"] == "j1"
    invalid = InvalidRequestError(
        "bad", code=grpc.StatusCode.INVALID_ARGUMENT, field_violations=[FieldViolation("t", "x")]
    )
    body = json.loads(bytes(jobs_error_response(invalid).body))
    assert body["error"]["fieldViolations"] == [{"field": "t", "description": "x"}]


def test_job_view() -> None:
    done = job_view(make_job(pb.JOB_STATUS_COMPLETED, job_id="j1", summary="S.", tags=["a"]))
    assert done["jobId"] == "j1" and done["jobType"] == "CARD_ANALYSIS"
    assert done["status"] == "COMPLETED" and done["errorMessage"] is None
    assert done["result"] == {"summary": "S.", "tags": ["a"], "model": ""}
    failed = job_view(make_job(pb.JOB_STATUS_FAILED, error="Timeout: 30s"))
    assert failed["result"] is None and failed["errorMessage"] == "Timeout: 30s"


class _QuietJobs:
    """A JobService client whose job takes a while to change: the stream is quiet."""

    def __init__(self, _address: str) -> None:
        pass

    async def get_job(self, job_id: str) -> pb.Job:
        return make_job(pb.JOB_STATUS_PROCESSING, job_id=job_id)

    async def watch(self, job_id: str):  # type: ignore[no-untyped-def]
        import asyncio

        yield make_job(pb.JOB_STATUS_PROCESSING, job_id=job_id)
        await asyncio.sleep(0.35)
        yield make_job(pb.JOB_STATUS_COMPLETED, job_id=job_id, summary="S.", tags=["a"])

    async def close(self) -> None:
        pass


async def test_quiet_event_stream_sends_keepalive_comments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import httpx

    from san_jobs.web import app as web

    monkeypatch.setattr(web, "SSE_HEARTBEAT_SECONDS", 0.1)
    application = web.create_app(
        job_service="127.0.0.1:1",
        database_url=f"sqlite+aiosqlite:///{tmp_path}/web.db",
        client_factory=_QuietJobs,  # type: ignore[arg-type]
    )
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://web") as http:
            response = await http.get("/api/async-jobs/j1/events")
    text = response.text
    assert text.count(": keepalive") >= 2
    events = [line for line in text.splitlines() if line.startswith("event: ")]
    assert events == ["event: job", "event: job", "event: end"]


def test_job_view_history_shows_the_road_to_now() -> None:
    job = make_job(pb.JOB_STATUS_COMPLETED, job_id="j1", summary="S.", tags=["a"])
    job.create_time.FromSeconds(1_800_000_000)
    first = job.attempts.add(
        attempt=1, error_code="UNAVAILABLE", error_message="AI gateway unavailable: x"
    )
    first.start_time.FromSeconds(1_800_000_001)
    first.end_time.FromSeconds(1_800_000_002)
    second = job.attempts.add(attempt=2)
    second.start_time.FromSeconds(1_800_000_005)
    second.end_time.FromSeconds(1_800_000_006)
    job.attempt_count = 2
    job.complete_time.FromSeconds(1_800_000_006)
    job.update_time.FromSeconds(1_800_000_006)
    steps = job_view(job)["history"]
    assert [s["status"] for s in steps] == [
        "PENDING",
        "PROCESSING",
        "ATTEMPT FAILED",
        "PROCESSING",
        "COMPLETED",
    ]
    assert steps[2]["errorMessage"] == "AI gateway unavailable: x"
    assert steps[-1]["time"] == job_view(job)["updateTime"]


def test_a_failed_or_cancelled_history_ends_with_how_it_ended() -> None:
    failed = make_job(pb.JOB_STATUS_FAILED, job_id="j2")
    failed.create_time.FromSeconds(1_800_000_000)
    only = failed.attempts.add(attempt=1, error_code="INTERNAL", error_message="boom")
    only.start_time.FromSeconds(1_800_000_001)
    only.end_time.FromSeconds(1_800_000_002)
    failed.attempt_count = 1
    failed.error_message = "boom"
    failed.fail_time.FromSeconds(1_800_000_002)
    steps = job_view(failed)["history"]
    assert [s["status"] for s in steps] == ["PENDING", "PROCESSING", "ATTEMPT FAILED", "FAILED"]
    assert "errorMessage" not in steps[-1]  # the attempt's line said it already
    assert steps[-1]["time"].startswith("2027-01-15T08:00:02")

    cancelled = make_job(pb.JOB_STATUS_CANCELLED, job_id="j3")
    cancelled.create_time.FromSeconds(1_800_000_000)
    cancelled.cancel_time.FromSeconds(1_800_000_009)
    steps = job_view(cancelled)["history"]
    assert [s["status"] for s in steps] == ["PENDING", "CANCELLED"]
    assert steps[-1]["time"].startswith("2027-01-15T08:00:09")

    running = make_job(pb.JOB_STATUS_PROCESSING, job_id="j4")
    running.create_time.FromSeconds(1_800_000_000)
    now = running.attempts.add(attempt=1)
    now.start_time.FromSeconds(1_800_000_001)
    running.attempt_count = 1
    assert [s["status"] for s in job_view(running)["history"]] == ["PENDING"]
