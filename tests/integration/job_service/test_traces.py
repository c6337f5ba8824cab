"""Issue 14's proof for traces: one trace runs from a client's Enqueue through the
job-service's Enqueue span, the worker's attempt span and the gateway call to the
gateway's backend span, over the unary gateway RPCs and over StreamCalls.

Both real servers run in this process on loopback ports (JobServiceRuntime on SQLite
and PostgreSQL, the real AiGateway with its instant backend), sharing one
TracerProvider whose spans go to an in-memory exporter; the client's span is the
test's own, its context sent as `traceparent` metadata.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from san_jobs.ai_gateway.backends.instant import InstantBackend
from san_jobs.ai_gateway.servicer import AiGatewayServicer
from san_jobs.job_service.server import JobServiceRuntime, prepare_database
from san_jobs.job_service.settings import JobServiceSettings
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from san_jobs.shared.trace_context import outgoing_metadata
from san_jobs.shared.trace_logging import install_trace_ids
from tests.support.gateway_in_process import InProcessGateway, gateway_in_process
from tests.support.jobs_api import SAMPLE_TEXT, card_request, wait_terminal

ENQUEUE = "san.jobs.v1.JobService/Enqueue"
GATEWAY_ANALYZE = "san.aigateway.v1.AiGatewayService/AnalyzeContent"


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """A provider (never the global one) exporting every span at once to memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


@asynccontextmanager
async def services(
    tmp_path: Path, database_url: str, provider: TracerProvider | None
) -> AsyncIterator[tuple[pb_grpc.JobServiceStub, JobServiceRuntime, InProcessGateway]]:
    """The real gateway and JobService, both traced with `provider` (None: untraced)."""
    async with gateway_in_process(tmp_path, InstantBackend(), provider) as gw:
        settings = JobServiceSettings(
            listen="127.0.0.1:0",
            database_url=database_url,
            gateway=gw.address,
            poll_interval=0.2,
            grace=0.5,
        )
        await prepare_database(settings)
        runtime = JobServiceRuntime(settings, tracer_provider=provider)
        await runtime.start()
        try:
            async with grpc.aio.insecure_channel(runtime.address) as channel:
                yield pb_grpc.JobServiceStub(channel), runtime, gw
        finally:
            await runtime.stop()


def only(found: list[ReadableSpan], name: str) -> ReadableSpan:
    named = [span for span in found if span.name == name]
    assert len(named) == 1, f"{name}: {[s.name for s in found]}"
    return named[0]


def parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


@pytest.fixture(params=["stream", "unary"])
def gateway_transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How JobService calls the gateway: StreamCalls, or the unary RPCs (a gateway
    without StreamCalls: JobService falls back to them, as with an older gateway)."""
    if request.param == "unary":

        async def unimplemented(self: AiGatewayServicer, requests: Any, context: Any) -> None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")

        monkeypatch.setattr(AiGatewayServicer, "StreamCalls", unimplemented)
    return str(request.param)


async def test_one_trace_runs_from_the_clients_enqueue_to_the_gateways_backend_call(
    tmp_path: Path,
    database_url: str,
    gateway_transport: str,
    spans: tuple[TracerProvider, InMemorySpanExporter],
    caplog: pytest.LogCaptureFixture,
) -> None:
    provider, exporter = spans
    install_trace_ids(caplog.handler)
    caplog.set_level(logging.INFO, logger="job_service")
    async with services(tmp_path, database_url, provider) as (stub, runtime, _):
        client = provider.get_tracer("test-client")
        with client.start_as_current_span("client enqueue", kind=SpanKind.CLIENT) as mine:
            reply = await stub.Enqueue(
                card_request("traced", SAMPLE_TEXT), metadata=outgoing_metadata(), timeout=10
            )
        job_id = reply.job.id
        final = await wait_terminal(stub, [job_id], timeout=20)
        assert final[job_id].status == pb.JOB_STATUS_COMPLETED
        stored = await runtime.store.queries.get(job_id)

    trace_id = mine.get_span_context().trace_id
    in_trace = [s for s in exporter.get_finished_spans() if s.context.trace_id == trace_id]

    enqueue = only(in_trace, ENQUEUE)
    assert parent_id(enqueue) == mine.get_span_context().span_id
    assert enqueue.kind is SpanKind.SERVER
    assert dict(enqueue.attributes or {}) == {
        "rpc.system": "grpc",
        "rpc.service": "san.jobs.v1.JobService",
        "rpc.method": "Enqueue",
        "rpc.grpc.status_code": 0,
    }
    # What Enqueue stored is its own span's context.
    assert enqueue.context is not None
    flags = int(enqueue.context.trace_flags)
    assert stored.traceparent == f"00-{trace_id:032x}-{span_id(enqueue):016x}-{flags:02x}"

    attempt = only(in_trace, "job.attempt")
    assert parent_id(attempt) == span_id(enqueue)
    assert dict(attempt.attributes or {}) == {
        "job.id": job_id,
        "job.type": "CARD_ANALYSIS",
        "job.attempt": 1,
        "job.outcome": "completed",
    }
    assert attempt.status.status_code is StatusCode.UNSET

    backend = only(in_trace, "ai_gateway.backend")
    attributes = dict(backend.attributes or {})
    assert attributes["ai_gateway.method"] == "AnalyzeContent"
    assert attributes["ai_gateway.model"] == final[job_id].card_analysis_result.model
    assert attributes["ai_gateway.cached"] is False
    assert attributes["job.id"] == job_id
    if gateway_transport == "unary":
        # The gateway's server span continues the attempt; the backend span is its child.
        call = only(in_trace, GATEWAY_ANALYZE)
        assert call.kind is SpanKind.SERVER
        assert parent_id(call) == span_id(attempt)
        assert parent_id(backend) == span_id(call)
    else:
        # On the shared stream the call's own traceparent is the parent.
        assert not [s for s in in_trace if s.name.startswith("san.aigateway")]
        assert parent_id(backend) == span_id(attempt)

    # The worker's line about the job carries the trace id.
    completed = [r for r in caplog.records if f"job_id={job_id} completed" in r.getMessage()]
    assert [getattr(r, "trace_id", None) for r in completed] == [f"{trace_id:032x}"]


async def test_a_malformed_traceparent_is_ignored_and_the_call_starts_a_new_trace(
    tmp_path: Path, database_url: str, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    async with services(tmp_path, database_url, provider) as (stub, runtime, _):
        replies = [
            await stub.Enqueue(
                card_request(f"odd-{index}", SAMPLE_TEXT),
                metadata=(("traceparent", value),),
                timeout=10,
            )
            for index, value in enumerate(
                [
                    "garbage",
                    "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # zero trace id
                    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" + "x" * 300,
                ]
            )
        ]
        stored = [await runtime.store.queries.get(reply.job.id) for reply in replies]
    enqueues = [s for s in exporter.get_finished_spans() if s.name == ENQUEUE]
    assert len(enqueues) == 3
    for span in enqueues:
        assert span.parent is None  # a new root, not an error
        assert dict(span.attributes or {})["rpc.grpc.status_code"] == 0
    roots = {f"{span.context.trace_id:032x}" for span in enqueues}
    assert {job.traceparent.split("-")[1] for job in stored if job.traceparent} == roots


async def test_a_failed_rpc_has_an_error_span_with_its_code(
    tmp_path: Path, database_url: str, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    async with services(tmp_path, database_url, provider) as (stub, _, _):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.GetJob(pb.GetJobRequest(job_id="no-such-job"), timeout=10)
    code = refused.value.code()
    (span,) = [s for s in exporter.get_finished_spans() if s.name.endswith("/GetJob")]
    assert span.attributes is not None
    assert span.attributes["rpc.grpc.status_code"] == code.value[0]
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == code.name


async def test_untraced_services_store_no_traceparent_and_make_no_spans(
    tmp_path: Path, database_url: str, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    async with services(tmp_path, database_url, None) as (stub, runtime, _):
        assert runtime.tracing is None
        client = provider.get_tracer("test-client")
        with client.start_as_current_span("client enqueue"):
            reply = await stub.Enqueue(
                card_request("plain", SAMPLE_TEXT), metadata=outgoing_metadata(), timeout=10
            )
        final = await wait_terminal(stub, [reply.job.id], timeout=20)
        assert final[reply.job.id].status == pb.JOB_STATUS_COMPLETED
        assert (await runtime.store.queries.get(reply.job.id)).traceparent is None
    assert [s.name for s in exporter.get_finished_spans()] == ["client enqueue"]
    assert trace.get_current_span().get_span_context().is_valid is False
