"""AsyncJobsClient: on the wire against an in-process grpc.aio server with a scripted
JobService (the token and deadline sent, rich errors read from real trailers, an
unreachable server), and its own surface over san_jobs.client.testing."""

from __future__ import annotations

import asyncio
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
    CardAnalysisResult,
    DuplicateJobError,
    EnqueueOutcome,
    EnqueueRequest,
    InvalidRequestError,
    JobNotFoundError,
    RateLimitedError,
    ServiceUnavailableError,
)
from san_jobs.client.testing import FakeJobService
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
    """Answers chosen per test: enqueue errors by target id; GetJob knows no job."""

    def __init__(self) -> None:
        self.metadata: list[tuple[str, str]] = []
        self.deadlines: list[float | None] = []

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
        await context.abort_with_status(
            rich(
                grpc.StatusCode.NOT_FOUND,
                f"job {request.job_id} not found",
                error_info("JOB_NOT_FOUND", jobId=request.job_id),
            )
        )
        raise AssertionError("aborted")


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
        assert str(missing.value) == "job missing not found"


async def test_unreachable_server_is_service_unavailable() -> None:
    async with AsyncJobsClient("127.0.0.1:1", timeout=5) as client:
        with pytest.raises(ServiceUnavailableError):
            await client.get_job("j1")


async def test_watch_polls_after_the_stream_breaks() -> None:
    service = FakeJobService()
    async with service.async_client() as client:
        job = (await client.enqueue("scrap-1", CardAnalysisInput(text="x"))).job
        updates = client.watch(job.id, timeout=10, poll_interval=0.01)
        seen = [(await anext(updates)).status]
        service.break_streams()
        service.start(job.id)
        seen.append((await anext(updates)).status)  # polled
        service.complete(job.id, CardAnalysisResult(summary="s"))
        seen += [j.status async for j in updates]
        assert seen == [pb.JOB_STATUS_PENDING, pb.JOB_STATUS_PROCESSING, pb.JOB_STATUS_COMPLETED]
        assert [c.rpc for c in service.calls].count("StreamJobUpdates") == 1
        with pytest.raises(JobNotFoundError):
            await client.wait("0b0f6c2e-5c43-4f7b-9a53-000000000404", timeout=5)


async def test_iter_jobs_follows_the_pages() -> None:
    service = FakeJobService()
    async with service.async_client() as client:
        ids = [
            (await client.enqueue(f"t-{i}", CardAnalysisInput(text="x"))).job.id for i in range(3)
        ]
        found = [job.id async for job in client.iter_jobs(page_size=2)]
    assert found == ids[::-1]
    assert [c.rpc for c in service.calls].count("ListJobs") == 2


async def test_on_chunk_may_be_a_coroutine() -> None:
    heard: list[int] = []

    async def on_chunk(start: int, outcomes: list[EnqueueOutcome]) -> None:
        await asyncio.sleep(0)
        heard.append(start)

    requests = [
        EnqueueRequest(target_id=f"t-{i}", card_analysis_input=CardAnalysisInput(text="x"))
        for i in range(3)
    ]
    async with FakeJobService().async_client() as client:
        outcomes = await client.enqueue_many(requests, batch_size=2, on_chunk=on_chunk)
    assert heard == [0, 2]
    assert all(o.ok for o in outcomes)
