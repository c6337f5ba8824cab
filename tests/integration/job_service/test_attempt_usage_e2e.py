"""Usage per attempt with a real AiGateway (local backend): JobService stores what
each call consumed with its attempt (never in the result), GetJob shows it, and
GetUsage sums it by job type, model and caller."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from san_jobs.ai_gateway.backends.local.backend import MODEL as LOCAL_MODEL
from san_jobs.ai_gateway.model_tokens import estimate_tokens_all
from san_jobs.ai_gateway.server import GatewayServer
from san_jobs.ai_gateway.settings import GatewaySettings
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from tests.integration.job_service.conftest import StartService
from tests.support.jobs_api import wait_terminal

TEXT = "Durable job queues keep work safe across crashes; a worker claims a job with a lease."


@pytest.fixture
async def local_gateway() -> AsyncIterator[Callable[..., Awaitable[str]]]:
    servers: list[GatewayServer] = []

    async def start(**overrides: Any) -> str:
        server = GatewayServer(GatewaySettings(listen="127.0.0.1:0", backend="local", **overrides))
        servers.append(server)
        return f"127.0.0.1:{await server.start()}"

    yield start
    for server in servers:
        await server.stop(0)


def card(target: str, caller: str) -> pb.EnqueueRequest:
    return pb.EnqueueRequest(
        job_type=pb.JOB_TYPE_CARD_ANALYSIS,
        target_id=target,
        requested_by=caller,
        card_analysis_input=pb.CardAnalysisInput(text=TEXT),
    )


def embedding(target: str, caller: str) -> pb.EnqueueRequest:
    return pb.EnqueueRequest(
        job_type=pb.JOB_TYPE_EMBEDDING,
        target_id=target,
        requested_by=caller,
        embedding_input=pb.EmbeddingInput(text=TEXT),
    )


async def test_usage_is_stored_per_attempt_shown_by_getjob_and_summed(
    start_service: StartService, local_gateway: Callable[..., Awaitable[str]]
) -> None:
    service = await start_service(gateway=await local_gateway())
    requests = [card("c1", "alice"), card("c2", "alice"), card("c3", "bob"), embedding("e1", "bob")]
    ids = [(await service.stub.Enqueue(r)).job.id for r in requests]
    done = await wait_terminal(service.stub, ids, timeout=60)
    assert all(j.status == pb.JOB_STATUS_COMPLETED for j in done.values())

    shown = (await service.stub.GetJob(pb.GetJobRequest(job_id=ids[0]))).job
    (attempt,) = shown.attempts
    assert attempt.HasField("usage")
    assert attempt.usage.model == LOCAL_MODEL == shown.card_analysis_result.model
    assert attempt.usage.input_tokens == estimate_tokens_all(["", TEXT])
    assert attempt.usage.output_tokens > 0
    assert attempt.usage.duration.ToTimedelta().total_seconds() > 0
    stored = await service.runtime.store.queries.get(ids[0])
    assert stored.result is not None and "usage" not in stored.result

    summed = await service.stub.GetUsage(pb.GetUsageRequest())
    rows = {(t.job_type, t.requested_by): t for t in summed.totals}
    assert set(rows) == {
        (pb.JOB_TYPE_CARD_ANALYSIS, "alice"),
        (pb.JOB_TYPE_CARD_ANALYSIS, "bob"),
        (pb.JOB_TYPE_EMBEDDING, "bob"),
    }
    alice = rows[(pb.JOB_TYPE_CARD_ANALYSIS, "alice")]
    assert (alice.model, alice.attempts, alice.cached_attempts) == (LOCAL_MODEL, 2, 0)
    assert alice.input_tokens == 2 * attempt.usage.input_tokens
    assert rows[(pb.JOB_TYPE_EMBEDDING, "bob")].output_tokens == 0
    assert not summed.truncated

    embeddings = await service.stub.GetUsage(pb.GetUsageRequest(job_types=[pb.JOB_TYPE_EMBEDDING]))
    assert [t.job_type for t in embeddings.totals] == [pb.JOB_TYPE_EMBEDDING]
    # A range that ended before the attempts did sums nothing.
    before = Timestamp()
    before.FromDatetime(shown.create_time.ToDatetime().replace(year=2000))
    empty = await service.stub.GetUsage(pb.GetUsageRequest(end_time=before))
    assert list(empty.totals) == []
