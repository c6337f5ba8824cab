"""The sync JobsClient against a scripted server (grpcio-testing)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar

import grpc
import grpc_testing
import pytest
from _clients_support import bad_request, error_info, make_job, retry_info, rich_trailers

import san_jobs.client
from san_jobs.client import (
    CardAnalysisInput,
    DuplicateJobError,
    FieldViolation,
    InvalidJobStateError,
    InvalidRequestError,
    JobNotFoundError,
    JobsClient,
    JobsError,
    PermissionDeniedError,
    RateLimitedError,
    ServiceUnavailableError,
    TilGenerationInput,
    UnauthenticatedError,
    WaitTimeoutError,
)
from san_jobs.client._channel import RETRY_POLICY, ChannelSettings
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc

SERVICE = pb.DESCRIPTOR.services_by_name["JobService"]
T = TypeVar("T")


def method(name: str) -> Any:
    return SERVICE.methods_by_name[name]


@pytest.fixture
def channel() -> Any:
    return grpc_testing.channel([SERVICE], grpc_testing.strict_real_time())


@pytest.fixture
def client(channel: Any) -> JobsClient:
    return JobsClient(channel=channel, token="s3cret")


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=2) as executor:
        yield executor


def background(pool: ThreadPoolExecutor, fn: Callable[[], T]) -> Future[T]:
    return pool.submit(fn)


def test_public_names_are_pinned() -> None:
    assert sorted(san_jobs.client.__all__) == sorted(
        [
            "SERVICE_CONFIG",
            "TERMINAL_STATUSES",
            "AsyncJobsClient",
            "CardAnalysisInput",
            "CardAnalysisResult",
            "ChannelSettings",
            "DispatchPause",
            "DuplicateJobError",
            "EmbeddingInput",
            "EmbeddingResult",
            "EnqueueOutcome",
            "EnqueueRequest",
            "EnqueueResponse",
            "FieldViolation",
            "GetJobStatsResponse",
            "GetUsageResponse",
            "InvalidJobStateError",
            "InvalidRequestError",
            "Job",
            "JobInput",
            "JobNotFoundError",
            "JobStatus",
            "JobType",
            "JobsClient",
            "JobsError",
            "ListFailureGroupsResponse",
            "ListJobsResponse",
            "PauseReason",
            "PemSource",
            "PermissionDeniedError",
            "PruneJobsResponse",
            "RateLimitedError",
            "RecallGenerationInput",
            "RecallGenerationResult",
            "RecallSource",
            "RetryFailedResponse",
            "ServiceUnavailableError",
            "TilGenerationInput",
            "TilGenerationResult",
            "UnauthenticatedError",
            "WaitTimeoutError",
            "error_from_rpc",
            "is_terminal",
        ]
    )
    for name in san_jobs.client.__all__:
        assert getattr(san_jobs.client, name) is not None


def test_every_job_types_input_and_result_is_exported() -> None:
    """Read from the contract: a new job type's messages are exported with it."""
    from san_jobs.client._job_types import JOB_TYPES

    for info in JOB_TYPES:
        for message in (info.input_type, info.result_type):
            name = message.DESCRIPTOR.name
            assert name in san_jobs.client.__all__, f"{info.name}: {name} is not exported"
            assert getattr(san_jobs.client, name) is message


class _FlakyJobService(pb_grpc.JobServiceServicer):
    """A real JobService whose GetJob fails `failures` times with `code`, then answers;
    it counts the calls that reached it."""

    def __init__(self, failures: int, code: grpc.StatusCode) -> None:
        self.failures = failures
        self.code = code
        self.calls = 0

    def GetJob(self, request: pb.GetJobRequest, context: grpc.ServicerContext) -> pb.GetJobResponse:
        self.calls += 1
        if self.calls <= self.failures:
            context.abort(self.code, "instance going away")
        return pb.GetJobResponse(job=make_job(job_id=request.job_id))


@contextmanager
def flaky_job_service(
    failures: int, code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE
) -> Iterator[tuple[_FlakyJobService, str]]:
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    service = _FlakyJobService(failures, code)
    pb_grpc.add_JobServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield service, f"127.0.0.1:{port}"
    finally:
        server.stop(None)


# Retries are the channel's (its service config), so they are tested on a real channel
# to a real server: the scripted test channel above ignores channel options.
def test_unavailable_is_retried_until_it_succeeds() -> None:
    with flaky_job_service(failures=2) as (service, address), JobsClient(address) as client:
        job = client.get_job("j-retried")
    assert job.id == "j-retried"
    assert service.calls == 3


def test_retries_stop_after_max_attempts() -> None:
    with (
        flaky_job_service(failures=100) as (service, address),
        JobsClient(address) as client,
        pytest.raises(ServiceUnavailableError),
    ):
        client.get_job("j-down")
    assert service.calls == RETRY_POLICY["maxAttempts"]


def test_other_codes_are_answers_not_retried() -> None:
    with (
        flaky_job_service(failures=1, code=grpc.StatusCode.INTERNAL) as (service, address),
        JobsClient(address) as client,
        pytest.raises(JobsError) as caught,
    ):
        client.get_job("j-broken")
    assert caught.value.code == grpc.StatusCode.INTERNAL
    assert service.calls == 1


def test_channel_options_keepalive_and_message_sizes() -> None:
    options = dict(ChannelSettings().options())
    assert options["grpc.keepalive_time_ms"] > 0
    assert options["grpc.max_receive_message_length"] >= 4 * 1024 * 1024


def test_enqueue_sends_typed_request_with_token_and_idempotency_key(
    client: JobsClient, channel: Any, pool: ThreadPoolExecutor
) -> None:
    future = background(
        pool,
        lambda: client.enqueue(
            "scrap-1", CardAnalysisInput(text="hello", url="https://x.test"), max_attempts=2
        ),
    )
    metadata, request, rpc = channel.take_unary_unary(method("Enqueue"))
    assert ("authorization", "Bearer s3cret") in metadata
    assert request.job_type == pb.JOB_TYPE_CARD_ANALYSIS
    assert request.target_id == "scrap-1"
    assert request.card_analysis_input.text == "hello"
    assert request.max_attempts == 2
    assert request.on_duplicate == pb.ON_DUPLICATE_REJECT
    assert len(request.request_id) == 36  # a generated UUID makes retries idempotent
    job = make_job(job_id="7a8e0f4e-0000-4000-8000-000000000001")
    rpc.terminate(pb.EnqueueResponse(job=job), (), grpc.StatusCode.OK, "")
    response = future.result(timeout=5)
    assert response.job.id == job.id
    assert not response.deduplicated


def test_enqueue_infers_til_type_and_passes_return_existing(
    client: JobsClient, channel: Any, pool: ThreadPoolExecutor
) -> None:
    future = background(
        pool,
        lambda: client.enqueue(
            "2026-11-29",
            TilGenerationInput(day="2026-11-29", notes=["a", "b"]),
            request_id="key-1",
            return_existing=True,
        ),
    )
    _, request, rpc = channel.take_unary_unary(method("Enqueue"))
    assert request.job_type == pb.JOB_TYPE_TIL_GENERATION
    assert list(request.til_generation_input.notes) == ["a", "b"]
    assert request.request_id == "key-1"
    assert request.on_duplicate == pb.ON_DUPLICATE_RETURN_EXISTING
    rpc.terminate(pb.EnqueueResponse(job=make_job(), deduplicated=True), (), grpc.StatusCode.OK, "")
    assert future.result(timeout=5).deduplicated


def test_duplicate_carries_existing_job_id(
    client: JobsClient, channel: Any, pool: ThreadPoolExecutor
) -> None:
    future = background(pool, lambda: client.enqueue("scrap-1", CardAnalysisInput(text="x")))
    _, _, rpc = channel.take_unary_unary(method("Enqueue"))
    message = "an active job exists"
    rpc.terminate(
        None,
        rich_trailers(
            grpc.StatusCode.ALREADY_EXISTS,
            message,
            error_info("DUPLICATE_JOB", existingJobId="job-123"),
        ),
        grpc.StatusCode.ALREADY_EXISTS,
        message,
    )
    with pytest.raises(DuplicateJobError) as caught:
        future.result(timeout=5)
    assert caught.value.existing_job_id == "job-123"
    assert caught.value.reason == "DUPLICATE_JOB"
    assert caught.value.code is grpc.StatusCode.ALREADY_EXISTS
    assert str(caught.value) == message


def test_invalid_request_carries_field_violations(
    client: JobsClient, channel: Any, pool: ThreadPoolExecutor
) -> None:
    future = background(pool, lambda: client.enqueue("", CardAnalysisInput(text="")))
    _, _, rpc = channel.take_unary_unary(method("Enqueue"))
    rpc.terminate(
        None,
        rich_trailers(
            grpc.StatusCode.INVALID_ARGUMENT,
            "bad request",
            error_info("INVALID_REQUEST"),
            bad_request(("target_id", "required"), ("card_analysis_input.text", "required")),
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "bad request",
    )
    with pytest.raises(InvalidRequestError) as caught:
        future.result(timeout=5)
    assert caught.value.field_violations == (
        FieldViolation("target_id", "required"),
        FieldViolation("card_analysis_input.text", "required"),
    )


@pytest.mark.parametrize(
    ("code", "details", "expected"),
    [
        (grpc.StatusCode.NOT_FOUND, [error_info("JOB_NOT_FOUND", jobId="j1")], JobNotFoundError),
        (
            grpc.StatusCode.FAILED_PRECONDITION,
            [error_info("INVALID_JOB_STATE", jobId="j1", status="COMPLETED")],
            InvalidJobStateError,
        ),
        (grpc.StatusCode.UNAVAILABLE, [], ServiceUnavailableError),
        (grpc.StatusCode.DEADLINE_EXCEEDED, [], ServiceUnavailableError),
        (
            grpc.StatusCode.UNAUTHENTICATED,
            [error_info("UNAUTHENTICATED", jobId="j1")],
            UnauthenticatedError,
        ),
        (
            grpc.StatusCode.PERMISSION_DENIED,
            [error_info("PERMISSION_DENIED", jobId="j1")],
            PermissionDeniedError,
        ),
        (grpc.StatusCode.INTERNAL, [], JobsError),
    ],
)
def test_status_codes_become_typed_errors(
    client: JobsClient,
    channel: Any,
    pool: ThreadPoolExecutor,
    code: grpc.StatusCode,
    details: list[object],
    expected: type[JobsError],
) -> None:
    future = background(pool, lambda: client.cancel_job("j1", reason="no longer needed"))
    _, request, rpc = channel.take_unary_unary(method("CancelJob"))
    assert request.reason == "no longer needed"
    rpc.terminate(None, rich_trailers(code, "it failed", *details), code, "it failed")
    with pytest.raises(expected) as caught:
        future.result(timeout=5)
    assert type(caught.value) is expected
    assert caught.value.code is code
    if details:
        assert caught.value.metadata["jobId"] == "j1"
    if isinstance(caught.value, InvalidJobStateError):
        assert caught.value.status == "COMPLETED"


def test_plain_status_without_details_still_maps(
    client: JobsClient, channel: Any, pool: ThreadPoolExecutor
) -> None:
    future = background(pool, lambda: client.get_job("j1"))
    _, _, rpc = channel.take_unary_unary(method("GetJob"))
    rpc.terminate(None, (), grpc.StatusCode.NOT_FOUND, "no such job")
    with pytest.raises(JobNotFoundError, match="no such job"):
        future.result(timeout=5)


def test_rate_limited_carries_retry_delay(
    client: JobsClient, channel: Any, pool: ThreadPoolExecutor
) -> None:
    future = background(pool, lambda: client.get_job_stats())
    _, _, rpc = channel.take_unary_unary(method("GetJobStats"))
    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    rpc.terminate(
        None,
        rich_trailers(code, "slow down", retry_info(2.5), error_info("RATE_LIMITED")),
        code,
        "",
    )
    with pytest.raises(RateLimitedError) as caught:
        future.result(timeout=5)
    assert caught.value.retry_delay == pytest.approx(2.5)
    assert caught.value.reason == "RATE_LIMITED"


def test_list_and_iter_jobs_follow_pages(
    client: JobsClient, channel: Any, pool: ThreadPoolExecutor
) -> None:
    since = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
    future = background(
        pool,
        lambda: [
            job.id
            for job in client.iter_jobs(
                statuses=[pb.JOB_STATUS_FAILED],
                error_message_contains="Timeout",
                created_after=since,
                page_size=1,
            )
        ],
    )
    _, first, rpc = channel.take_unary_unary(method("ListJobs"))
    assert list(first.statuses) == [pb.JOB_STATUS_FAILED]
    assert first.error_message_contains == "Timeout"
    assert first.created_after.ToDatetime(tzinfo=UTC) == since
    assert first.page_token == ""
    rpc.terminate(
        pb.ListJobsResponse(jobs=[make_job(job_id="a")], next_page_token="p2"),
        (),
        grpc.StatusCode.OK,
        "",
    )
    _, second, rpc = channel.take_unary_unary(method("ListJobs"))
    assert second.page_token == "p2"
    assert second.error_message_contains == "Timeout"
    rpc.terminate(pb.ListJobsResponse(jobs=[make_job(job_id="b")]), (), grpc.StatusCode.OK, "")
    assert future.result(timeout=5) == ["a", "b"]


def test_retry_failed_request(client: JobsClient, channel: Any, pool: ThreadPoolExecutor) -> None:
    future = background(
        pool,
        lambda: client.retry_failed(
            job_types=[pb.JOB_TYPE_CARD_ANALYSIS], error_message_contains="Timeout", dry_run=True
        ),
    )
    _, request, rpc = channel.take_unary_unary(method("RetryFailed"))
    assert request.dry_run
    assert list(request.job_types) == [pb.JOB_TYPE_CARD_ANALYSIS]
    rpc.terminate(
        pb.RetryFailedResponse(matched_count=2, job_ids=["a", "b"]), (), grpc.StatusCode.OK, ""
    )
    assert list(future.result(timeout=5).job_ids) == ["a", "b"]


def test_wait_returns_terminal_job_from_stream(
    client: JobsClient, channel: Any, pool: ThreadPoolExecutor
) -> None:
    future = background(pool, lambda: client.wait("j1", timeout=10))
    _, request, rpc = channel.take_unary_stream(method("StreamJobUpdates"))
    assert list(request.job_ids) == ["j1"]
    rpc.send_response(pb.StreamJobUpdatesResponse(job=make_job(job_id="j1")))
    rpc.send_response(
        pb.StreamJobUpdatesResponse(
            job=make_job(pb.JOB_STATUS_PROCESSING, job_id="j1", attempt=1, update_seconds=2)
        )
    )
    done = make_job(pb.JOB_STATUS_COMPLETED, job_id="j1", attempt=1, summary="Done.")
    rpc.send_response(pb.StreamJobUpdatesResponse(job=done))
    rpc.terminate((), grpc.StatusCode.OK, "")
    job = future.result(timeout=5)
    assert job.status == pb.JOB_STATUS_COMPLETED
    assert job.card_analysis_result.summary == "Done."


def test_watch_falls_back_to_polling_when_stream_breaks(
    client: JobsClient, channel: Any, pool: ThreadPoolExecutor
) -> None:
    future = background(
        pool, lambda: [j.status for j in client.watch("j1", timeout=10, poll_interval=0.01)]
    )
    _, _, stream = channel.take_unary_stream(method("StreamJobUpdates"))
    stream.send_response(pb.StreamJobUpdatesResponse(job=make_job(job_id="j1")))
    stream.terminate((), grpc.StatusCode.UNAVAILABLE, "connection reset")
    # The same PENDING state seen again by polling is not reported twice.
    _, request, rpc = channel.take_unary_unary(method("GetJob"))
    assert request.job_id == "j1"
    rpc.terminate(pb.GetJobResponse(job=make_job(job_id="j1")), (), grpc.StatusCode.OK, "")
    _, _, rpc = channel.take_unary_unary(method("GetJob"))
    rpc.terminate(None, (), grpc.StatusCode.UNAVAILABLE, "still down")  # tolerated
    _, _, rpc = channel.take_unary_unary(method("GetJob"))
    failed = make_job(pb.JOB_STATUS_FAILED, job_id="j1", attempt=3, error="Timeout: 30s")
    rpc.terminate(pb.GetJobResponse(job=failed), (), grpc.StatusCode.OK, "")
    assert future.result(timeout=5) == [pb.JOB_STATUS_PENDING, pb.JOB_STATUS_FAILED]


def test_wait_for_unknown_job_raises_not_found(
    client: JobsClient, channel: Any, pool: ThreadPoolExecutor
) -> None:
    future = background(pool, lambda: client.wait("j404", timeout=10))
    _, _, stream = channel.take_unary_stream(method("StreamJobUpdates"))
    stream.terminate((), grpc.StatusCode.NOT_FOUND, "job j404 not found")
    with pytest.raises(JobNotFoundError):
        future.result(timeout=5)


def test_wait_times_out(client: JobsClient, channel: Any, pool: ThreadPoolExecutor) -> None:
    future = background(pool, lambda: client.wait("j1", timeout=0.2, poll_interval=0.05))
    _, _, stream = channel.take_unary_stream(method("StreamJobUpdates"))
    stream.send_response(pb.StreamJobUpdatesResponse(job=make_job(job_id="j1")))
    time.sleep(0.3)
    stream.terminate((), grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded")
    with pytest.raises(WaitTimeoutError, match=r"not finished after 0\.2s"):
        future.result(timeout=5)
