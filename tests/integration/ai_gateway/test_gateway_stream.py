"""StreamCalls over a real grpc.aio server on 127.0.0.1:0: many calls per message, each
behaving as its unary RPC (answers, errors with details, records), cancel, half-close,
client cancellation, protocol violations, bounded batches and shutdown."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
from gateway_helpers import (
    CountingBackend,
    SlowTextBackend,
    StartGateway,
    bearer,
    rich,
    rich_status,
    wait_for_lines,
    wait_until,
    write_caller_tokens,
)
from google.protobuf import duration_pb2
from google.rpc import code_pb2, status_pb2
from grpc_status import rpc_status

from san_jobs.ai_gateway.backends.instant import InstantBackend
from san_jobs.ai_gateway.bounds import BATCH_BYTES as MAX_RESULTS_BYTES
from san_jobs.ai_gateway.models import AnalyzeInput, AnalyzeResult
from san_jobs.ai_gateway.server import GatewayServer
from san_jobs.ai_gateway.settings import GatewaySettings
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2 as pb
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2_grpc as pb_grpc

EN = (
    "A job queue stores background work in a database table. Each worker claims a job by "
    "updating its row inside a transaction. A lease brings a job back when its worker dies. "
    "The weather was nice."
)
KO = (
    "작업 큐는 데이터베이스 테이블에 작업을 저장합니다. 각 워커는 트랜잭션 안에서 작업을 "
    "가져갑니다. 워커가 죽으면 임대가 작업을 다시 큐로 돌려보냅니다."
)
CLIENT = (("x-client-id", "job-service"),)
Stream = Any  # grpc.aio.StreamStreamCall[pb.StreamCallsRequest, pb.StreamCallsResponse]


def analyze(call_id: str, text: str = "Hello there. Second.", **fields: Any) -> pb.StreamedCall:
    return pb.StreamedCall(
        call_id=call_id, analyze_content=pb.AnalyzeContentRequest(text=text), **fields
    )


def timeout(seconds: float) -> duration_pb2.Duration:
    duration = duration_pb2.Duration()
    duration.FromMilliseconds(int(seconds * 1000))
    return duration


def open_stream(stub: Any, metadata: Sequence[tuple[str, str]] = CLIENT) -> Stream:
    return stub.StreamCalls(metadata=metadata)


async def send(stream: Stream, *calls: pb.StreamedCall, cancel: Sequence[str] = ()) -> None:
    await stream.write(pb.StreamCallsRequest(calls=calls, cancel_call_ids=cancel))


async def read_results(stream: Stream, n: int) -> dict[str, pb.StreamedCallResult]:
    """The next ``n`` results, by call_id (each call_id exactly once)."""
    results: dict[str, pb.StreamedCallResult] = {}
    while len(results) < n:
        message = await stream.read()
        assert message is not grpc.aio.EOF, f"stream ended after {len(results)} of {n} results"
        for result in message.results:
            assert result.call_id not in results, f"{result.call_id} answered twice"
            results[result.call_id] = result
    assert len(results) == n
    return results


async def read_to_end(stream: Stream) -> list[pb.StreamCallsResponse]:
    """Every remaining message, until the server ends the stream."""
    messages = []
    while (message := await stream.read()) is not grpc.aio.EOF:
        messages.append(message)
    return messages


async def stream_error(stream: Stream) -> grpc.aio.AioRpcError:
    """How the server ended the stream, reading (and dropping) any results before."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await read_to_end(stream)
    return caught.value


async def test_many_calls_in_one_message_answer_as_the_unary_rpcs(
    start_gateway: StartGateway,
) -> None:
    stub = await start_gateway()  # the local backend: real, deterministic answers
    til = pb.GenerateTilRequest(day="2024-05-01", notes=["gRPC deadlines", "gRPC deadlines", "빵"])
    recall = pb.GenerateRecallRequest(sources=[pb.Source(title="Q", text=EN), pb.Source(text=KO)])
    calls = [
        analyze("a-en", EN),
        analyze("a-ko", KO),
        pb.StreamedCall(call_id="til", generate_til=til),
        pb.StreamedCall(call_id="recall", generate_recall=recall),
        *(analyze(f"n{i}", f"Note {i} about queues. Workers claim jobs.") for i in range(12)),
    ]
    stream = open_stream(stub)
    await send(stream, *calls)
    await stream.done_writing()
    results = await read_results(stream, len(calls))
    assert await read_to_end(stream) == []
    assert await stream.code() == grpc.StatusCode.OK

    assert timeless(results["a-en"].analyze_content) == timeless(
        await stub.AnalyzeContent(pb.AnalyzeContentRequest(text=EN))
    )
    assert timeless(results["a-ko"].analyze_content) == timeless(
        await stub.AnalyzeContent(pb.AnalyzeContentRequest(text=KO))
    )
    assert timeless(results["til"].generate_til) == timeless(await stub.GenerateTil(til))
    assert timeless(results["recall"].generate_recall) == timeless(
        await stub.GenerateRecall(recall)
    )
    for i in range(12):
        result = results[f"n{i}"]
        assert result.WhichOneof("outcome") == "analyze_content"
        assert timeless(result.analyze_content) == timeless(
            await stub.AnalyzeContent(
                pb.AnalyzeContentRequest(text=f"Note {i} about queues. Workers claim jobs.")
            )
        )


def timeless(answer: Any) -> Any:
    """The answer without the one part that differs between two runs of one call: the
    gateway's time in its usage (the tokens and model must be the same)."""
    same = type(answer)()
    same.CopyFrom(answer)
    assert same.HasField("usage")
    same.usage.ClearField("duration")
    return same


async def unary_status(stub: Any, call: pb.StreamedCall) -> status_pb2.Status:
    """The google.rpc.Status the unary RPC of the call's kind ends with."""
    which = call.WhichOneof("request")
    method = {
        "analyze_content": stub.AnalyzeContent,
        "generate_til": stub.GenerateTil,
        "generate_recall": stub.GenerateRecall,
    }[which]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await method(getattr(call, which), metadata=CLIENT, timeout=5)
    status = rpc_status.from_call(caught.value)
    assert status is not None
    return status


@pytest.mark.parametrize(
    ("settings", "call", "code", "reason"),
    [
        (
            {},
            analyze("tokens", "word " * 7000 + "단어" * 1000),
            grpc.StatusCode.INVALID_ARGUMENT,
            "TOKEN_LIMIT_EXCEEDED",
        ),
        ({}, analyze("blank", " \n "), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_REQUEST"),
        (
            {},
            pb.StreamedCall(
                call_id="til", generate_til=pb.GenerateTilRequest(day="2024-13-01", notes=[" "])
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_REQUEST",
        ),
        (
            {"fault_unavailable_rate": 1.0},
            analyze("down"),
            grpc.StatusCode.UNAVAILABLE,
            "BACKEND_UNAVAILABLE",
        ),
        (
            {"fault_malformed_rate": 1.0},
            pb.StreamedCall(
                call_id="bad", generate_til=pb.GenerateTilRequest(day="2024-01-01", notes=["n"])
            ),
            grpc.StatusCode.INTERNAL,
            "MALFORMED_RESPONSE",
        ),
        (
            {"fault_rate_limit_rate": 1.0, "fault_retry_delay": 2.5},
            analyze("429"),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "RATE_LIMITED",
        ),
        (
            {"min_deadline": 1.0},
            analyze("short", timeout=timeout(0.5)),
            grpc.StatusCode.DEADLINE_EXCEEDED,
            "DEADLINE_EXCEEDED",
        ),
    ],
)
async def test_each_error_is_the_unary_status_in_the_result(
    start_gateway: StartGateway,
    settings: dict[str, Any],
    call: pb.StreamedCall,
    code: grpc.StatusCode,
    reason: str,
) -> None:
    stub = await start_gateway(CountingBackend(), **settings)
    stream = open_stream(stub)
    await send(stream, call)
    result = (await read_results(stream, 1))[call.call_id]
    assert result.WhichOneof("outcome") == "error"
    err = rich_status(result.error)
    assert (err.code, err.info.reason, err.info.domain) == (code, reason, "aigateway.san")
    if call.HasField("timeout"):
        assert "deadline too short" in err.message  # the seconds left differ a little
    else:  # exactly what the unary RPC sends: code, message and every detail
        assert result.error == await unary_status(stub, call)
    stream.cancel()


async def test_call_timeout_bounds_the_work_and_stops_it(
    start_gateway: StartGateway, tmp_path: Path
) -> None:
    log = tmp_path / "calls.jsonl"
    backend = SlowTextBackend(delay=30)
    stub = await start_gateway(backend, call_log=log)
    stream = open_stream(stub)
    await send(
        stream,
        analyze("slow", "slow one", timeout=timeout(0.3)),
        analyze("latest", "slow two", timeout=timeout(0.6)),
        analyze("fast", "fast one", timeout=timeout(5)),
    )
    first = await read_results(stream, 1)
    assert list(first) == ["fast"]
    assert first["fast"].analyze_content.summary == "fast one"
    results = await read_results(stream, 2)
    for call_id in ("slow", "latest"):
        err = rich_status(results[call_id].error)
        assert err.code == grpc.StatusCode.DEADLINE_EXCEEDED
        assert err.info.reason == "DEADLINE_EXCEEDED"
    assert sorted(backend.cancelled) == ["slow one", "slow two"]
    records = [json.loads(line) for line in await wait_for_lines(log, 3)]
    assert sorted(r["code"] for r in records) == ["DEADLINE_EXCEEDED", "DEADLINE_EXCEEDED", "OK"]
    stream.cancel()


async def test_injected_latency_past_the_call_timeout(start_gateway: StartGateway) -> None:
    stub = await start_gateway(fault_latency=2.0, backend="instant")
    stream = open_stream(stub)
    await send(stream, analyze("late", timeout=timeout(0.3)), analyze("patient"))
    results = await read_results(stream, 1)
    err = rich_status(results["late"].error)
    assert err.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "did not finish within" in err.message
    # No timeout means no deadline: the other call waits out the latency and answers.
    results = await read_results(stream, 1)
    assert results["patient"].analyze_content.summary == "Hello there."
    stream.cancel()


async def test_a_call_without_request_is_invalid_argument(start_gateway: StartGateway) -> None:
    stub = await start_gateway(backend="instant")
    stream = open_stream(stub)
    await send(stream, pb.StreamedCall(call_id="empty"), analyze("ok"))
    results = await read_results(stream, 2)
    err = rich_status(results["empty"].error)
    assert (err.code, err.info.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_REQUEST")
    assert err.bad_request is not None
    assert [v.field for v in err.bad_request.field_violations] == ["request"]
    assert results["ok"].analyze_content.summary == "Hello there."
    stream.cancel()


async def test_a_hostile_traceparent_in_a_call_is_ignored(start_gateway: StartGateway) -> None:
    """StreamedCall.traceparent comes from whoever calls: garbage, a NUL, 100 KB or
    an all-zero trace id start a new trace; the call is answered as any other."""
    stub = await start_gateway(backend="instant")
    stream = open_stream(stub)
    hostile = {
        "garbage": "not a traceparent",
        "nul": "00-\x00" + "a" * 50,
        "huge": "00-" + "f" * 100_000,
        "zero": "00-" + "0" * 32 + "-" + "0" * 16 + "-01",
    }
    calls = []
    for call_id, value in hostile.items():
        call = analyze(call_id)
        call.traceparent = value
        calls.append(call)
    await send(stream, *calls)
    results = await read_results(stream, len(hostile))
    for call_id in hostile:
        assert results[call_id].analyze_content.summary == "Hello there.", results[call_id]
    stream.cancel()


class Exploding(InstantBackend):
    async def analyze(self, request: AnalyzeInput, time_left: float | None) -> AnalyzeResult:
        raise RuntimeError("secret internals")


async def test_unexpected_exception_is_internal_as_in_unary(
    start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    stub = await start_gateway(Exploding())
    stream = open_stream(stub)
    await send(stream, analyze("boom"))
    error = (await read_results(stream, 1))["boom"].error
    assert (error.code, error.message) == (code_pb2.INTERNAL, "internal error in the AI gateway")
    assert list(error.details) == []
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.AnalyzeContent(pb.AnalyzeContentRequest(text="hi"))
    assert caught.value.code() == grpc.StatusCode.INTERNAL
    assert caught.value.details() == error.message
    tracebacks = [r for r in caplog.records if "failed unexpectedly" in r.getMessage()]
    assert len(tracebacks) == 2 and all(r.exc_info for r in tracebacks)
    assert "secret internals" not in str(error)
    stream.cancel()


async def test_cancel_one_call_while_the_others_complete(
    start_gateway: StartGateway, tmp_path: Path
) -> None:
    log = tmp_path / "calls.jsonl"
    backend = SlowTextBackend(delay=30)
    stub = await start_gateway(backend, call_log=log)
    stream = open_stream(stub)
    await send(stream, analyze("slow", "slow work"), analyze("keep", "slow but kept"))
    await wait_until(lambda: len(backend.started) == 2, "both calls to reach the backend")
    await send(stream, analyze("fast", "Fast one."), cancel=["slow", "no-such-call"])
    results = await read_results(stream, 2)
    assert results["fast"].analyze_content.summary == "Fast one."
    assert results["slow"].error.code == code_pb2.CANCELLED
    assert backend.cancelled == ["slow work"]  # its backend work stopped; the other's did not
    # Started and cancelled in the same message: cancelled before it ever ran.
    await send(stream, analyze("never", "Never run."), cancel=["never"])
    assert (await read_results(stream, 1))["never"].error.code == code_pb2.CANCELLED
    assert "Never run." not in backend.started
    # A finished call cannot be cancelled any more: that cancel is ignored, and the one
    # call left in flight gets the one result left.
    await send(stream, cancel=["fast", "keep"])
    await stream.done_writing()
    messages = await read_to_end(stream)
    assert [(r.call_id, r.error.code) for m in messages for r in m.results] == [
        ("keep", code_pb2.CANCELLED)
    ]
    assert await stream.code() == grpc.StatusCode.OK
    records = [json.loads(line) for line in await wait_for_lines(log, 4)]
    codes = sorted(r["code"] for r in records)
    assert codes == ["CANCELLED", "CANCELLED", "CANCELLED", "OK"]


async def test_half_close_finishes_the_calls_then_ends_ok(
    start_gateway: StartGateway,
) -> None:
    backend = SlowTextBackend(delay=0.3)
    stub = await start_gateway(backend)
    stream = open_stream(stub)
    await send(stream, analyze("a", "slow a."), analyze("b", "slow b."), analyze("c", "Fast c."))
    await stream.done_writing()
    messages = await read_to_end(stream)
    results = {r.call_id: r for m in messages for r in m.results}
    assert {k: r.analyze_content.summary for k, r in results.items()} == {
        "a": "slow a.",
        "b": "slow b.",
        "c": "Fast c.",
    }
    assert await stream.code() == grpc.StatusCode.OK
    assert backend.cancelled == []


async def test_client_cancelling_the_stream_cancels_every_call(
    start_gateway: StartGateway, tmp_path: Path
) -> None:
    log = tmp_path / "calls.jsonl"
    backend = SlowTextBackend(delay=30)
    stub = await start_gateway(backend, call_log=log)
    stream = open_stream(stub)
    await send(stream, *(analyze(str(i), f"slow {i}") for i in range(5)))
    await wait_until(lambda: len(backend.started) == 5, "the calls to reach the backend")
    stream.cancel()
    await wait_until(lambda: len(backend.cancelled) == 5, "every call to be cancelled")
    records = [json.loads(line) for line in await wait_for_lines(log, 5)]
    assert [r["code"] for r in records] == ["CANCELLED"] * 5


async def test_connection_breaking_cancels_every_call(
    start_gateway: StartGateway,
) -> None:
    backend = SlowTextBackend(delay=30)
    await start_gateway(backend)
    port = start_gateway.port  # type: ignore[attr-defined]
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stream = open_stream(pb_grpc.AiGatewayServiceStub(channel))
    await send(stream, analyze("1", "slow 1"), analyze("2", "slow 2"))
    await wait_until(lambda: len(backend.started) == 2, "the calls to reach the backend")
    await channel.close()
    await wait_until(lambda: len(backend.cancelled) == 2, "every call to be cancelled")


@pytest.mark.parametrize(
    ("messages", "field"),
    [
        ([[analyze("a"), analyze("")]], "calls[1].call_id"),
        ([[analyze("a"), analyze("b"), analyze("a")]], "calls[2].call_id"),
        ([[analyze("slow", "slow in flight")], [analyze("slow", "again")]], "calls[0].call_id"),
    ],
)
async def test_protocol_violation_ends_the_stream_and_cancels_the_calls(
    start_gateway: StartGateway, messages: list[list[pb.StreamedCall]], field: str
) -> None:
    backend = SlowTextBackend(delay=30)
    stub = await start_gateway(backend)
    stream = open_stream(stub)
    for i, calls in enumerate(messages):
        if i:  # the earlier call is in flight (in the backend) before the repeat comes
            await wait_until(lambda: len(backend.started) == 1, "the first call")
        await send(stream, *calls)
    err = rich(await stream_error(stream))
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT
    assert err.info.reason == "INVALID_REQUEST"
    assert err.bad_request is not None
    assert [v.field for v in err.bad_request.field_violations] == [field]
    if len(messages) > 1:
        await wait_until(lambda: backend.cancelled == ["slow in flight"], "the call cancelled")
    else:
        assert backend.started == []  # a message that breaks the protocol starts nothing


async def test_call_records_per_call_with_job_and_attempt(
    start_gateway: StartGateway, tmp_path: Path
) -> None:
    log = tmp_path / "calls.jsonl"
    stub = await start_gateway(backend="instant", call_log=log)
    stream = open_stream(stub)
    await send(
        stream,
        analyze("1", job_id="job-1", attempt=2),
        pb.StreamedCall(
            call_id="2",
            job_id="job-2",
            attempt=1,
            generate_til=pb.GenerateTilRequest(day="2024-01-01", notes=["n"]),
        ),
        pb.StreamedCall(
            call_id="3",
            generate_recall=pb.GenerateRecallRequest(sources=[pb.Source(text="A. B.")]),
        ),
        analyze("4", " ", job_id="job-4", attempt=3),
    )
    await stream.done_writing()
    await read_to_end(stream)
    records = sorted(
        (json.loads(line) for line in await wait_for_lines(log, 4)), key=lambda r: r["method"]
    )
    assert [
        (r["method"], r["client_id"], r["job_id"], r["attempt"], r["code"]) for r in records
    ] == [
        ("AnalyzeContent", "job-service", "job-1", 2, "OK"),
        ("AnalyzeContent", "job-service", "job-4", 3, "INVALID_ARGUMENT"),
        ("GenerateRecall", "job-service", None, None, "OK"),
        ("GenerateTil", "job-service", "job-2", 1, "OK"),
    ]
    assert all(r["duration_ms"] >= 0 for r in records)


async def test_rate_limit_is_keyed_by_the_streams_caller(
    start_gateway: StartGateway, tmp_path: Path
) -> None:
    tokens = write_caller_tokens(tmp_path / "callers", a="a" * 32, b="b" * 32)
    stub = await start_gateway(
        backend="instant", rate_limit=1.0, burst=2, caller_tokens_file=tokens
    )
    stream = open_stream(stub, bearer("a" * 32))
    await send(stream, analyze("1"), analyze("2"), analyze("3"))
    results = await read_results(stream, 3)
    limited = [r for r in results.values() if r.WhichOneof("outcome") == "error"]
    assert len(limited) == 1
    err = rich_status(limited[0].error)
    assert (err.code, err.info.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "RATE_LIMITED")
    assert 0.5 < err.retry_seconds <= 1.0
    assert err.quota is not None and err.quota.violations[0].subject == "client:a"
    # The stream spent caller "a"'s bucket: a unary call as "a" is limited, "b" is not.
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.AnalyzeContent(analyze("x").analyze_content, metadata=bearer("a" * 32))
    assert rich(caught.value).info.reason == "RATE_LIMITED"
    await stub.AnalyzeContent(analyze("x").analyze_content, metadata=bearer("b" * 32))
    stream.cancel()


async def test_results_finishing_together_share_a_message(start_gateway: StartGateway) -> None:
    stub = await start_gateway(backend="instant")
    stream = open_stream(stub)
    await send(stream, *(analyze(str(i), f"Call {i}.") for i in range(50)))
    await stream.done_writing()
    messages = await read_to_end(stream)
    results = [r for m in messages for r in m.results]
    assert sorted(r.call_id for r in results) == sorted(str(i) for i in range(50))
    assert max(len(m.results) for m in messages) > 1
    assert len(messages) < 50


async def test_a_batch_holds_about_a_mebibyte_and_a_big_result_goes_alone(
    start_gateway: StartGateway,
) -> None:
    # The instant backend's TIL body is the notes themselves: a result as big as its call.
    stub = await start_gateway(backend="instant", max_input_tokens=10_000_000)
    note = "x" * 60_000
    calls = [
        pb.StreamedCall(
            call_id=str(i), generate_til=pb.GenerateTilRequest(day="2024-01-01", notes=[note])
        )
        for i in range(80)
    ]
    big = "y" * 1_500_000
    calls.append(
        pb.StreamedCall(
            call_id="big", generate_til=pb.GenerateTilRequest(day="2024-01-01", notes=[big])
        )
    )
    stream = open_stream(stub)
    # About 6.3 MB in one request message: over gRPC's default 4 MiB receive limit.
    await send(stream, *calls)
    await stream.done_writing()
    messages = await read_to_end(stream)
    results = [r for m in messages for r in m.results]
    assert len(results) == 81
    assert all(r.WhichOneof("outcome") == "generate_til" for r in results)
    for message in messages:
        if any(r.call_id == "big" for r in message.results):
            assert len(message.results) == 1
        else:
            assert sum(r.ByteSize() for r in message.results) <= MAX_RESULTS_BYTES
    assert max(len(m.results) for m in messages) > 1


async def test_shutdown_answers_the_calls_in_flight_then_ends_the_stream() -> None:
    backend = SlowTextBackend(delay=0.5)
    server = GatewayServer(GatewaySettings(listen="127.0.0.1:0"), backend)
    await server.start()
    stopping: asyncio.Future[None] | None = None
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stream = open_stream(pb_grpc.AiGatewayServiceStub(channel))
            await send(stream, analyze("slow", "slow but in time."))
            await wait_until(lambda: backend.started == ["slow but in time."], "the call")
            # A long grace: unless the stream ends by itself, stop takes all of it.
            stopping = asyncio.ensure_future(server.stop(grace=60))
            results = await read_results(stream, 1)
            assert results["slow"].analyze_content.summary == "slow but in time."
            err = await stream_error(stream)
            assert err.code() == grpc.StatusCode.UNAVAILABLE
            assert err.details() == "the AI gateway is shutting down"
            await stopping
    finally:
        if stopping is None:
            await server.stop(0)


async def test_shutdown_grace_ends_calls_that_take_too_long(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    backend = SlowTextBackend(delay=30)
    server = GatewayServer(GatewaySettings(listen="127.0.0.1:0", call_log=log), backend)
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = pb_grpc.AiGatewayServiceStub(channel)
        stream = open_stream(stub)
        await send(stream, analyze("stuck", "slow stream call"))
        unary = asyncio.ensure_future(
            stub.AnalyzeContent(pb.AnalyzeContentRequest(text="slow unary call"))
        )
        await wait_until(lambda: len(backend.started) == 2, "the calls to start")
        await server.stop(grace=0.2)
        # Both stopped, and recorded, before stop returned (it closes the call log).
        assert sorted(backend.cancelled) == ["slow stream call", "slow unary call"]
        records = [json.loads(line) for line in log.read_text().splitlines()]
        assert [r["code"] for r in records] == ["CANCELLED", "CANCELLED"]
        with pytest.raises(grpc.aio.AioRpcError):
            await read_to_end(stream)
        with pytest.raises(grpc.aio.AioRpcError):
            await unary
