"""Small helpers over the generated JobService stubs, for tests that drive real
servers (the SDK has its own tests; these keep acceptance tests independent of it)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterable

import grpc

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc

TERMINAL = {pb.JOB_STATUS_COMPLETED, pb.JOB_STATUS_FAILED, pb.JOB_STATUS_CANCELLED}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def channel(address: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(address)


def card_request(target_id: str, text: str, **kwargs: object) -> pb.EnqueueRequest:
    return pb.EnqueueRequest(
        job_type=pb.JOB_TYPE_CARD_ANALYSIS,
        target_id=target_id,
        card_analysis_input=pb.CardAnalysisInput(text=text),
        **kwargs,  # type: ignore[arg-type]
    )


SAMPLE_TEXT = (
    "Durable job queues keep work safe across crashes. A worker claims a job with a lease. "
    "If the worker dies, the lease expires and another worker takes the job again. "
    "Every failure is written down with its reason, so operators can retry them later."
)


async def enqueue_cards(
    stub: pb_grpc.JobServiceStub, count: int, prefix: str, concurrency: int = 32
) -> list[str]:
    semaphore = asyncio.Semaphore(concurrency)

    async def one(index: int) -> str:
        async with semaphore:
            response = await stub.Enqueue(
                card_request(f"{prefix}-{index}", f"{SAMPLE_TEXT} Item {index}."), timeout=30
            )
            return str(response.job.id)

    return list(await asyncio.gather(*(one(i) for i in range(count))))


async def wait_terminal(
    stub: pb_grpc.JobServiceStub,
    job_ids: Iterable[str],
    timeout: float,  # noqa: ASYNC109 - the gRPC deadline of the streams
) -> dict[str, pb.Job]:
    """Watch the jobs with StreamJobUpdates until all are terminal; the latest state of each."""
    ids = list(job_ids)
    latest: dict[str, pb.Job] = {}

    async def watch(chunk: list[str]) -> None:
        async for update in stub.StreamJobUpdates(
            pb.StreamJobUpdatesRequest(job_ids=chunk), timeout=timeout
        ):
            latest[update.job.id] = update.job

    await asyncio.wait_for(
        asyncio.gather(*(watch(ids[i : i + 1000]) for i in range(0, len(ids), 1000))), timeout
    )
    return latest


async def list_all(stub: pb_grpc.JobServiceStub, **filters: object) -> list[pb.Job]:
    jobs: list[pb.Job] = []
    token = ""
    while True:
        page = await stub.ListJobs(
            pb.ListJobsRequest(page_size=1000, page_token=token, **filters), timeout=30
        )  # type: ignore[arg-type]
        jobs.extend(page.jobs)
        token = page.next_page_token
        if not token:
            return jobs
