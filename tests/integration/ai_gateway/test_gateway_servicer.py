"""AiGatewayService over a real grpc.aio server on 127.0.0.1:0: answers and every error row."""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from pathlib import Path

import grpc
import pytest
from gateway_helpers import CountingBackend, StartGateway, bearer, rich, write_caller_tokens
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from san_jobs.ai_gateway.backends.local.embed import DIMENSION
from san_jobs.ai_gateway.model_tokens import estimate_tokens
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2 as pb
from tests.support.fake_openai_server import FakeOpenAI

EN = (
    "A job queue stores background work in a database table. Each worker claims a job by "
    "updating its row inside a transaction. A lease brings a job back when its worker dies. "
    "The weather was nice."
)
KO = (
    "작업 큐는 데이터베이스 테이블에 작업을 저장합니다. 각 워커는 트랜잭션 안에서 작업을 "
    "가져갑니다. 워커가 죽으면 임대가 작업을 다시 큐로 돌려보냅니다."
)
JOB_MD = (("x-client-id", "job-service"), ("x-job-id", "0b5c7c1e-job"), ("x-attempt", "3"))


def _sentences(text: str) -> list[str]:
    """The sentences of `text`, split after . ! ? (the test's own splitter, not the
    backend's: a bug there must not hide here)."""
    return [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s]


@pytest.mark.parametrize("text", [EN, KO])
async def test_analyze_content_local(start_gateway: StartGateway, text: str) -> None:
    stub = await start_gateway()
    reply = await stub.AnalyzeContent(pb.AnalyzeContentRequest(text=text), timeout=10)
    # Extractive: the summary is two of the text's own sentences (4 and 3 sentences
    # keep 2), whole and in order; never empty, never words of its own.
    summary = _sentences(reply.summary)
    assert len(summary) == 2
    assert summary == [s for s in _sentences(text) if s in summary]
    assert 3 <= len(reply.tags) <= 8
    assert len(reply.embedding) == DIMENSION
    assert math.sqrt(sum(x * x for x in reply.embedding)) == pytest.approx(1.0, abs=1e-5)
    assert reply.model == "local-textrank-v1"


async def test_generate_til_and_recall_local(start_gateway: StartGateway) -> None:
    stub = await start_gateway()
    til = await stub.GenerateTil(
        pb.GenerateTilRequest(day="2024-05-01", notes=["gRPC deadlines", "gRPC deadlines", "빵"]),
        timeout=10,
    )
    assert til.title.startswith("TIL 2024-05-01")
    assert "(×2)" in til.body
    recall = await stub.GenerateRecall(
        pb.GenerateRecallRequest(sources=[pb.Source(title="Q", text=EN), pb.Source(text=KO)]),
        timeout=10,
    )
    assert len(recall.questions) == 5  # 0 means 5
    assert {q.source_index for q in recall.questions} == {0, 1}


async def test_blank_text_is_invalid_argument_with_bad_request(start_gateway: StartGateway) -> None:
    stub = await start_gateway()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.AnalyzeContent(pb.AnalyzeContentRequest(text=" \n\t "), timeout=5)
    err = rich(caught.value)
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT
    assert (err.info.reason, err.info.domain) == ("INVALID_REQUEST", "aigateway.san")
    assert err.bad_request is not None
    assert [v.field for v in err.bad_request.field_violations] == ["text"]


async def test_til_and_recall_validation_names_each_field(start_gateway: StartGateway) -> None:
    stub = await start_gateway()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.GenerateTil(pb.GenerateTilRequest(day="2024-13-01", notes=["ok", " "]))
    fields = [v.field for v in rich(caught.value).bad_request.field_violations]  # type: ignore[union-attr]
    assert fields == ["day", "notes[1]"]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.GenerateRecall(
            pb.GenerateRecallRequest(sources=[pb.Source(title="t", text="")], question_count=21)
        )
    fields = [v.field for v in rich(caught.value).bad_request.field_violations]  # type: ignore[union-attr]
    assert fields == ["sources[0].text", "question_count"]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.GenerateRecall(pb.GenerateRecallRequest())
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_token_limit_before_any_work(start_gateway: StartGateway) -> None:
    backend = CountingBackend()
    stub = await start_gateway(backend)
    text = "word " * 7000 + "단어" * 1000
    tokens = estimate_tokens(text)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.AnalyzeContent(pb.AnalyzeContentRequest(text=text), timeout=5)
    err = rich(caught.value)
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT
    assert err.message == f"Token limit exceeded ({tokens} > 8192)"
    assert caught.value.details() == err.message
    assert err.info.reason == "TOKEN_LIMIT_EXCEEDED"
    assert backend.calls == 0


async def test_rate_limit_per_caller_with_retry_info(
    start_gateway: StartGateway, tmp_path: Path
) -> None:
    tokens = write_caller_tokens(tmp_path / "callers", a="a" * 32, b="b" * 32)
    stub = await start_gateway(
        CountingBackend(), rate_limit=1.0, burst=2, caller_tokens_file=tokens
    )
    req = pb.AnalyzeContentRequest(text="hello there")
    for _ in range(2):
        await stub.AnalyzeContent(req, metadata=bearer("a" * 32))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.AnalyzeContent(req, metadata=bearer("a" * 32))
    err = rich(caught.value)
    assert err.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert err.info.reason == "RATE_LIMITED"
    assert 0.5 < err.retry_seconds <= 1.0
    assert err.quota is not None and err.quota.violations[0].subject == "client:a"
    # Another caller has its own bucket.
    await stub.AnalyzeContent(req, metadata=bearer("b" * 32))
    # After the advertised delay, "a" may call again.
    await asyncio.sleep(err.retry_seconds)
    await stub.AnalyzeContent(req, metadata=bearer("a" * 32))


async def test_concurrency_cap(start_gateway: StartGateway) -> None:
    backend = CountingBackend(delay=0.5)
    stub = await start_gateway(backend, max_concurrency=1)
    req = pb.AnalyzeContentRequest(text="hello there")
    first = asyncio.ensure_future(stub.AnalyzeContent(req, timeout=5))
    await asyncio.wait_for(backend.started.wait(), 5)  # the first call holds the one slot
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.AnalyzeContent(req, timeout=5)
    err = rich(caught.value)
    assert err.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert err.info.reason == "RATE_LIMITED"
    assert err.retry_seconds > 0
    assert err.quota is not None and "in flight" in err.quota.violations[0].description
    assert (await first).summary == "hello there"


async def test_deadline_too_short_fails_fast(start_gateway: StartGateway) -> None:
    backend = CountingBackend()
    stub = await start_gateway(backend, min_deadline=1.0)
    start = time.monotonic()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.AnalyzeContent(pb.AnalyzeContentRequest(text="hi"), timeout=0.5)
    assert time.monotonic() - start < 0.4  # answered by the server, not by the client's clock
    err = rich(caught.value)
    assert err.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "deadline too short" in err.message
    assert backend.calls == 0


async def test_deadline_passing_during_work(start_gateway: StartGateway, tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    backend = CountingBackend(delay=5.0)
    stub = await start_gateway(backend, call_log=log)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.AnalyzeContent(pb.AnalyzeContentRequest(text="hi"), timeout=0.3)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    await asyncio.wait_for(backend.cancelled.wait(), 2)
    await _wait_for_lines(log, 1)
    assert json.loads((await _wait_for_lines(log, 1))[0])["code"] in {
        "DEADLINE_EXCEEDED",
        "CANCELLED",
    }


async def test_caller_going_away_cancels_the_work(
    start_gateway: StartGateway, tmp_path: Path
) -> None:
    log = tmp_path / "calls.jsonl"
    backend = CountingBackend(delay=5.0)
    stub = await start_gateway(backend, call_log=log)
    call = stub.AnalyzeContent(pb.AnalyzeContentRequest(text="hi"), timeout=10)
    await asyncio.wait_for(backend.started.wait(), 5)  # the work is under way
    call.cancel()
    await asyncio.wait_for(backend.cancelled.wait(), 2)
    await _wait_for_lines(log, 1)
    assert json.loads((await _wait_for_lines(log, 1))[0])["code"] == "CANCELLED"


async def test_injected_unavailable(start_gateway: StartGateway) -> None:
    stub = await start_gateway(fault_unavailable_rate=1.0)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.AnalyzeContent(pb.AnalyzeContentRequest(text="hi"), timeout=5)
    err = rich(caught.value)
    assert err.code == grpc.StatusCode.UNAVAILABLE
    assert err.info.reason == "BACKEND_UNAVAILABLE"
    assert err.message == "backend unavailable (injected fault)"


async def test_injected_malformed(start_gateway: StartGateway) -> None:
    stub = await start_gateway(fault_malformed_rate=1.0)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.GenerateTil(pb.GenerateTilRequest(day="2024-01-01", notes=["n"]), timeout=5)
    err = rich(caught.value)
    assert err.code == grpc.StatusCode.INTERNAL
    assert err.info.reason == "MALFORMED_RESPONSE"
    assert err.message.startswith("JSON Parse Error at line 4")


async def test_injected_rate_limit_and_latency(start_gateway: StartGateway) -> None:
    stub = await start_gateway(fault_rate_limit_rate=1.0, fault_retry_delay=2.5, fault_latency=0.2)
    start = time.monotonic()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.AnalyzeContent(pb.AnalyzeContentRequest(text="hi"), timeout=5)
    assert time.monotonic() - start >= 0.2
    err = rich(caught.value)
    assert err.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert err.info.reason == "RATE_LIMITED"
    assert err.retry_seconds == 2.5
    assert err.quota is not None


async def test_injected_latency_past_deadline(start_gateway: StartGateway) -> None:
    stub = await start_gateway(fault_latency=2.0)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.AnalyzeContent(pb.AnalyzeContentRequest(text="hi"), timeout=0.3)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


async def test_seeded_faults_repeat(start_gateway: StartGateway) -> None:
    async def codes() -> list[str]:
        stub = await start_gateway(CountingBackend(), fault_unavailable_rate=0.5, fault_seed=11)
        seen = []
        for _ in range(30):
            try:
                await stub.AnalyzeContent(pb.AnalyzeContentRequest(text="hi"), timeout=5)
                seen.append("OK")
            except grpc.aio.AioRpcError as err:
                seen.append(err.code().name)
        return seen

    first = await codes()
    assert first == await codes()
    assert {"OK", "UNAVAILABLE"} == set(first)


@pytest.mark.parametrize(
    ("model", "code", "reason", "message"),
    [
        ("rate-limited", grpc.StatusCode.RESOURCE_EXHAUSTED, "RATE_LIMITED", "upstream rate limit"),
        ("server-error", grpc.StatusCode.UNAVAILABLE, "BACKEND_UNAVAILABLE", "HTTP 500"),
        (
            "broken-json",
            grpc.StatusCode.INTERNAL,
            "MALFORMED_RESPONSE",
            "JSON Parse Error at line 4",
        ),
        (
            "context-length",
            grpc.StatusCode.INVALID_ARGUMENT,
            "TOKEN_LIMIT_EXCEEDED",
            "Token limit exceeded (9001 > 8192)",
        ),
    ],
)
async def test_openai_backend_errors_over_grpc(
    start_gateway: StartGateway,
    fake_openai: FakeOpenAI,
    model: str,
    code: grpc.StatusCode,
    reason: str,
    message: str,
) -> None:
    stub = await start_gateway(
        backend="openai", openai_base_url=fake_openai.base_url, openai_chat_model=model
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.AnalyzeContent(pb.AnalyzeContentRequest(text="hi"), timeout=5)
    err = rich(caught.value)
    assert (err.code, err.info.reason) == (code, reason)
    assert message in err.message
    if model == "rate-limited":
        assert err.retry_seconds == 7.0


async def test_openai_hang_uses_callers_deadline(
    start_gateway: StartGateway, fake_openai: FakeOpenAI
) -> None:
    stub = await start_gateway(
        backend="openai", openai_base_url=fake_openai.base_url, openai_chat_model="hang"
    )
    start = time.monotonic()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.AnalyzeContent(pb.AnalyzeContentRequest(text="hi"), timeout=0.5)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert time.monotonic() - start < 2


async def test_openai_ok_over_grpc(start_gateway: StartGateway, fake_openai: FakeOpenAI) -> None:
    stub = await start_gateway(
        backend="openai", openai_base_url=fake_openai.base_url, openai_chat_model="ok"
    )
    reply = await stub.AnalyzeContent(pb.AnalyzeContentRequest(text="hi"), timeout=5)
    assert reply.summary == "A fake summary."
    assert list(reply.embedding) == pytest.approx([0.6, 0.8])


async def test_call_log_records_job_metadata(start_gateway: StartGateway, tmp_path: Path) -> None:
    log = tmp_path / "sub" / "calls.jsonl"
    stub = await start_gateway(backend="instant", call_log=log)
    await stub.AnalyzeContent(pb.AnalyzeContentRequest(text="One. Two."), metadata=JOB_MD)
    with pytest.raises(grpc.aio.AioRpcError):
        await stub.AnalyzeContent(pb.AnalyzeContentRequest(text=""), metadata=JOB_MD)
    await stub.GenerateTil(pb.GenerateTilRequest(day="2024-01-01", notes=["n"]))
    lines = [json.loads(line) for line in (await _wait_for_lines(log, 3))]
    assert lines[0] == {
        "method": "AnalyzeContent",
        # Authentication is off: the caller is the peer's address (port dropped);
        # x-client-id is only the caller's own label.
        "caller": "127.0.0.1",
        "client_id": "job-service",
        "job_id": "0b5c7c1e-job",
        "attempt": 3,
        "code": "OK",
        "duration_ms": lines[0]["duration_ms"],
    }
    assert lines[1]["code"] == "INVALID_ARGUMENT"
    assert lines[2]["caller"] == "127.0.0.1"
    assert lines[2]["client_id"] is None  # no x-client-id: no label
    assert lines[2]["job_id"] is None and lines[2]["attempt"] is None


async def test_call_log_line_per_call_in_log(
    start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="ai_gateway.calls")
    stub = await start_gateway(backend="instant")
    await stub.AnalyzeContent(pb.AnalyzeContentRequest(text="hi"), metadata=JOB_MD)
    records = [r.getMessage() for r in caplog.records if r.name == "ai_gateway.calls"]
    assert len(records) == 1
    assert records[0].startswith(
        "AnalyzeContent caller=127.0.0.1 client=job-service job=0b5c7c1e-job attempt=3"
    )
    assert "status=OK" in records[0]


async def test_instant_backend(start_gateway: StartGateway) -> None:
    stub = await start_gateway(backend="instant")
    reply = await stub.AnalyzeContent(pb.AnalyzeContentRequest(text="First one. Second."))
    assert (reply.summary, list(reply.tags), reply.model) == ("First one.", ["first"], "instant")
    assert sum(x * x for x in reply.embedding) == pytest.approx(1.0)


async def test_health_reflection_and_not_serving_on_shutdown(start_gateway: StartGateway) -> None:
    from san_jobs.ai_gateway.server import GatewayServer
    from san_jobs.ai_gateway.settings import GatewaySettings

    server = GatewayServer(GatewaySettings(listen="127.0.0.1:0", backend="instant"))
    port = await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        name = "san.aigateway.v1.AiGatewayService"
        check = await health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
        assert check.status == health_pb2.HealthCheckResponse.SERVING

        reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
        responses = reflect.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")])
        )
        services = [s.name async for r in responses for s in r.list_services_response.service]
        assert name in services

        watch = health.Watch(health_pb2.HealthCheckRequest(service=name))
        assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVING
        stopping = asyncio.ensure_future(server.stop(grace=1))
        assert (await watch.read()).status == health_pb2.HealthCheckResponse.NOT_SERVING
        await stopping


async def _wait_for_lines(path: Path, n: int) -> list[str]:
    for _ in range(100):
        lines = await asyncio.to_thread(_read_lines, path)
        if len(lines) >= n:
            return lines
        await asyncio.sleep(0.02)
    raise AssertionError(f"{path} has fewer than {n} lines")


def _read_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def test_fault_injection_is_announced_as_warning(
    start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="ai_gateway")
    await start_gateway(backend="instant")
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    await start_gateway(backend="instant", fault_unavailable_rate=0.5, fault_seed=2)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1
    assert warnings[0].startswith("FAULT INJECTION IS ON: ")
    assert "unavailable_rate=0.5" in warnings[0] and "seed=2" in warnings[0]
