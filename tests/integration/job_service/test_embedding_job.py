"""JOB_TYPE_EMBEDDING end to end, with nothing scripted: a real JobService and a real
AiGateway (local backend: the offline hashed embedding; openai backend: /v1/embeddings
of its configured model, against a fake upstream) run an EMBEDDING job to COMPLETED;
bad input is INVALID_ARGUMENT naming the field."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest

from san_jobs.ai_gateway.backends.local.backend import MODEL as LOCAL_MODEL
from san_jobs.ai_gateway.backends.local.embed import DIMENSION, embed
from san_jobs.ai_gateway.server import GatewayServer
from san_jobs.ai_gateway.settings import GatewaySettings
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2 as gw
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2_grpc as gw_grpc
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from tests.integration.job_service.conftest import StartService
from tests.support.fake_openai_server import FakeOpenAI
from tests.support.jobs_api import wait_terminal
from tests.support.rich_errors import rich_error

TEXT = "Durable job queues keep work safe across crashes; a worker claims a job with a lease."

StartGateway = Callable[..., Awaitable[str]]


@pytest.fixture
async def real_gateway() -> AsyncIterator[StartGateway]:
    """`await real_gateway(**settings)`: the address of a running AiGateway."""
    servers: list[GatewayServer] = []

    async def start(**overrides: Any) -> str:
        server = GatewayServer(GatewaySettings(listen="127.0.0.1:0", **overrides))
        servers.append(server)
        return f"127.0.0.1:{await server.start()}"

    yield start
    for server in servers:
        await server.stop(0)


def embedding_request(target_id: str, text: str) -> pb.EnqueueRequest:
    return pb.EnqueueRequest(
        job_type=pb.JOB_TYPE_EMBEDDING,
        target_id=target_id,
        embedding_input=pb.EmbeddingInput(text=text),
    )


async def run_to_the_end(start_service: StartService, gateway: str, text: str) -> pb.Job:
    service = await start_service(gateway=gateway)
    job = (await service.stub.Enqueue(embedding_request("emb-1", text))).job
    assert job.job_type == pb.JOB_TYPE_EMBEDDING
    done = (await wait_terminal(service.stub, [job.id], timeout=60))[job.id]
    assert done.status == pb.JOB_STATUS_COMPLETED, done.error_message
    assert done.WhichOneof("result") == "embedding_result"
    stored = (await service.stub.GetJob(pb.GetJobRequest(job_id=job.id))).job
    assert stored.embedding_input.text == text
    return done


async def test_the_local_model_embeds_the_text(
    start_service: StartService, real_gateway: StartGateway
) -> None:
    done = await run_to_the_end(start_service, await real_gateway(), TEXT)
    vector = list(done.embedding_result.vector)
    assert len(vector) == DIMENSION
    assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, rel_tol=1e-5)
    # The offline model's own vector, as float32 carries it.
    assert vector == pytest.approx([float(x) for x in embed(TEXT)], abs=1e-6)
    assert done.embedding_result.model == LOCAL_MODEL


async def test_the_openai_backend_asks_its_embedding_model(
    start_service: StartService, real_gateway: StartGateway
) -> None:
    upstream = FakeOpenAI()
    upstream.start()
    try:
        address = await real_gateway(
            backend="openai",
            openai_base_url=upstream.base_url,
            openai_embedding_model="embedder-9",
        )
        done = await run_to_the_end(start_service, address, TEXT)
    finally:
        upstream.stop()
    # The fake answers [3, 4]: its model's dimension is 2; the gateway makes it unit length.
    assert list(done.embedding_result.vector) == pytest.approx([0.6, 0.8])
    assert done.embedding_result.model == "embedder-9"
    assert [(path, body) for path, body, _ in upstream.requests] == [
        ("embeddings", {"model": "embedder-9", "input": TEXT})
    ]


async def test_the_unary_embed_rpc_answers_alike(real_gateway: StartGateway) -> None:
    async with grpc.aio.insecure_channel(await real_gateway()) as channel:
        stub = gw_grpc.AiGatewayServiceStub(channel)
        answer = await stub.Embed(gw.EmbedRequest(text=TEXT), timeout=30)
        assert len(answer.vector) == DIMENSION and answer.model == LOCAL_MODEL
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Embed(gw.EmbedRequest(text="  "), timeout=30)
    error = rich_error(refused.value)
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.field_violations == {"text": "must not be empty or whitespace"}


@pytest.mark.parametrize(
    ("embedding_input", "field", "words"),
    [
        (pb.EmbeddingInput(text=" \n "), "embedding_input.text", "required"),
        (pb.EmbeddingInput(text="x" * 101), "embedding_input.text", "at most 100"),
        (pb.EmbeddingInput(text="a\x00b"), "embedding_input.text", "NUL"),
        (None, "embedding_input", "is required for EMBEDDING jobs"),
    ],
)
async def test_bad_input_is_refused_naming_the_field(
    start_service: StartService,
    embedding_input: pb.EmbeddingInput | None,
    field: str,
    words: str,
) -> None:
    service = await start_service(max_text_chars=100)
    request = pb.EnqueueRequest(job_type=pb.JOB_TYPE_EMBEDDING, target_id="emb-bad")
    if embedding_input is not None:
        request.embedding_input.CopyFrom(embedding_input)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await service.stub.Enqueue(request)
    error = rich_error(refused.value)
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert list(error.field_violations) == [field]
    assert words in error.field_violations[field]
