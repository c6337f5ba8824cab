"""Every answer carries what its call consumed (issue 13, point 9): the model, input
and output tokens (the provider's `usage` numbers with the openai backend, the
gateway's tokenizer otherwise) and the gateway's own time, on the unary RPCs and on
StreamCalls results alike."""

from __future__ import annotations

from gateway_helpers import StartGateway

from san_jobs.ai_gateway.model_tokens import estimate_tokens_all
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2 as pb
from tests.support.fake_openai_server import WITH_USAGE, FakeOpenAI

TEXT = "Queues hold jobs. Workers claim them and report back."


def seconds(usage: pb.Usage) -> float:
    return usage.duration.seconds + usage.duration.nanos / 1e9


async def test_local_backend_counts_with_the_gateway_tokenizer(
    start_gateway: StartGateway,
) -> None:
    stub = await start_gateway(backend="local")
    answer = await stub.AnalyzeContent(pb.AnalyzeContentRequest(text=TEXT, title="Queues"))
    usage = answer.usage
    assert usage.model == answer.model
    assert usage.input_tokens == estimate_tokens_all(["Queues", TEXT])
    assert usage.output_tokens == estimate_tokens_all([answer.summary, *answer.tags])
    assert usage.output_tokens > 0
    assert seconds(usage) > 0
    assert not usage.cached
    embedded = await stub.Embed(pb.EmbedRequest(text=TEXT))
    assert (embedded.usage.input_tokens, embedded.usage.output_tokens) == (
        estimate_tokens_all([TEXT]),
        0,
    )


async def test_openai_backend_reports_the_providers_usage(
    start_gateway: StartGateway, fake_openai: FakeOpenAI
) -> None:
    stub = await start_gateway(
        backend="openai",
        openai_base_url=fake_openai.base_url,
        openai_chat_model=WITH_USAGE,
        openai_embedding_model=WITH_USAGE,
    )
    analysed = await stub.AnalyzeContent(pb.AnalyzeContentRequest(text=TEXT))
    # A chat (111 + 22) and an embedding (7 + 0), as the upstream counted them.
    assert (analysed.usage.model, analysed.usage.input_tokens) == (WITH_USAGE, 118)
    assert analysed.usage.output_tokens == 22
    assert seconds(analysed.usage) > 0
    til = await stub.GenerateTil(pb.GenerateTilRequest(day="2025-01-02", notes=["a note"]))
    assert (til.usage.input_tokens, til.usage.output_tokens) == (111, 22)
    embedded = await stub.Embed(pb.EmbedRequest(text=TEXT))
    assert (embedded.usage.input_tokens, embedded.usage.output_tokens) == (7, 0)


async def test_openai_backend_without_provider_usage_falls_back_to_the_estimate(
    start_gateway: StartGateway, fake_openai: FakeOpenAI
) -> None:
    stub = await start_gateway(backend="openai", openai_base_url=fake_openai.base_url)
    til = await stub.GenerateTil(pb.GenerateTilRequest(day="2025-01-02", notes=["a note"]))
    assert til.usage.input_tokens == estimate_tokens_all(["a note"])
    assert til.usage.output_tokens == estimate_tokens_all([til.title, til.body])


async def test_stream_results_carry_usage(start_gateway: StartGateway) -> None:
    stub = await start_gateway(backend="local")
    stream = stub.StreamCalls()
    await stream.write(
        pb.StreamCallsRequest(
            calls=[
                pb.StreamedCall(call_id="a", analyze_content=pb.AnalyzeContentRequest(text=TEXT)),
                pb.StreamedCall(call_id="e", embed=pb.EmbedRequest(text=TEXT)),
            ]
        )
    )
    await stream.done_writing()
    results = {r.call_id: r async for response in stream for r in response.results}
    analysed = results["a"].analyze_content
    assert analysed.usage.input_tokens == estimate_tokens_all(["", TEXT])
    assert analysed.usage.model == analysed.model
    assert seconds(analysed.usage) > 0
    assert results["e"].embed.usage.input_tokens == estimate_tokens_all([TEXT])
