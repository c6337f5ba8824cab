"""AsyncJobsClient against an in-process grpc.aio server with a scripted JobService."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from _clients_support import bad_request, error_info, make_job, retry_info
from google.protobuf import any_pb2
from google.rpc import status_pb2
from grpc_status import rpc_status

from san_jobs.client import (
    AsyncJobsClient,
    CardAnalysisInput,
    DuplicateJobError,
    InvalidRequestError,
    JobNotFoundError,
    RateLimitedError,
    ServiceUnavailableError,
)
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc


def rich(code: grpc.StatusCode, message: str, *details: Any) -> grpc.Status:
    status = status_pb2.Status(code=code.value[0], message=message)
    for detail in details:
        packed = any_pb2.Any()
        packed.Pack(detail)
        status.details.append(packed)
    return rpc_status.to_status(status)


class ScriptedJobService(pb_grpc.JobServiceServicer):
    """Answers chosen per test: enqueue errors by target id, a stream that breaks."""

    def __init__(self) -> None:
        self.metadata: list[tuple[str, str]] = []
        self.deadlines: list[float | None] = []
        self.polls = 0

    async def Enqueue(self, request: pb.EnqueueRequest, context: Any) -> pb.EnqueueResponse:
        self.metadata = [(m.key, m.value) for m in context.invocation_metadata()]
        self.deadlines.append(context.time_remaining())
        if request.target_id == "dup":
            await context.abort_with_status(
                rich(
                    grpc.StatusCode.ALREADY_EXISTS,
                    "duplicate",
                    error_info("DUPLICATE_JOB", existingJobId="j-old"),
                )
            )
        if request.target_id == "":
            await context.abort_with_status(
                rich(grpc.StatusCode.INVALID_ARGUMENT, "bad", bad_request(("target_id", "blank")))
            )
        if request.target_id == "busy":
            await context.abort_with_status(
                rich(grpc.StatusCode.RESOURCE_EXHAUSTED, "slow down", retry_info(3))
            )
        return pb.EnqueueResponse(job=make_job(job_id="j-new", target_id=request.target_id))

    async def GetJob(self, request: pb.GetJobRequest, context: Any) -> pb.GetJobResponse:
        if request.job_id == "missing":
            await context.abort_with_status(
                rich(
                    grpc.StatusCode.NOT_FOUND,
                    "job missing not found",
                    error_info("JOB_NOT_FOUND", jobId="missing"),
                )
            )
        self.polls += 1
        status = pb.JOB_STATUS_PROCESSING if self.polls == 1 else pb.JOB_STATUS_COMPLETED
        return pb.GetJobResponse(
            job=make_job(status, job_id=request.job_id, attempt=1, update_seconds=10 + self.polls)
        )

    async def StreamJobUpdates(
        self, request: pb.StreamJobUpdatesRequest, context: Any
    ) -> AsyncIterator[pb.StreamJobUpdatesResponse]:
        yield pb.StreamJobUpdatesResponse(job=make_job(job_id=request.job_ids[0]))
        await context.abort(grpc.StatusCode.UNAVAILABLE, "instance going away")


@pytest.fixture
async def served() -> AsyncIterator[tuple[ScriptedJobService, str]]:
    server = grpc.aio.server()
    servicer = ScriptedJobService()
    pb_grpc.add_JobServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


async def test_enqueue_sends_token_and_deadline(served: tuple[ScriptedJobService, str]) -> None:
    servicer, address = served
    async with AsyncJobsClient(address, token="t0k", timeout=7) as client:
        response = await client.enqueue("scrap-1", CardAnalysisInput(text="x"))
    assert response.job.id == "j-new"
    assert ("authorization", "Bearer t0k") in servicer.metadata
    deadline = servicer.deadlines[-1]
    # grpc sends the timeout rounded up (grpc-timeout has a few digits), so the
    # server may see a few milliseconds more than 7 s, never a second more.
    assert deadline is not None and 5 < deadline < 7.1


async def test_rich_errors_from_trailers(served: tuple[ScriptedJobService, str]) -> None:
    _, address = served
    async with AsyncJobsClient(address) as client:
        with pytest.raises(DuplicateJobError) as duplicate:
            await client.enqueue("dup", CardAnalysisInput(text="x"))
        assert duplicate.value.existing_job_id == "j-old"
        with pytest.raises(InvalidRequestError) as invalid:
            await client.enqueue("", CardAnalysisInput(text="x"))
        assert [v.field for v in invalid.value.field_violations] == ["target_id"]
        with pytest.raises(RateLimitedError) as limited:
            await client.enqueue("busy", CardAnalysisInput(text="x"))
        assert limited.value.retry_delay == 3
        with pytest.raises(JobNotFoundError) as missing:
            await client.get_job("missing")
        assert missing.value.job_id == "missing"


async def test_watch_polls_after_the_stream_breaks(served: tuple[ScriptedJobService, str]) -> None:
    servicer, address = served
    async with AsyncJobsClient(address) as client:
        seen = [job.status async for job in client.watch("j1", timeout=10, poll_interval=0.01)]
        assert seen == [pb.JOB_STATUS_PENDING, pb.JOB_STATUS_PROCESSING, pb.JOB_STATUS_COMPLETED]
        assert servicer.polls == 2
        with pytest.raises(JobNotFoundError):
            await client.wait("missing", timeout=5)


async def test_unreachable_server_is_service_unavailable() -> None:
    async with AsyncJobsClient("127.0.0.1:1", timeout=5) as client:
        with pytest.raises(ServiceUnavailableError):
            await client.get_job("j1")
