"""The tracing setup (san_jobs.shared.tracing): off without an endpoint, the OTLP exporter
with --otlp-endpoint or OTEL_EXPORTER_OTLP_ENDPOINT (checked against a real OTLP
collector stub on loopback), and the W3C trace context helpers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as otlp
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as otlp_grpc
from opentelemetry.sdk.trace import TracerProvider

from san_jobs.ai_gateway.cli import load_settings as gateway_settings
from san_jobs.job_service.cli import load_settings as job_settings
from san_jobs.shared.trace_context import (
    context_of,
    current_traceparent,
    incoming_context,
    outgoing_metadata,
)
from san_jobs.shared.tracing import OTLP_ENDPOINT_ENV, start_tracing

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class Collector(otlp_grpc.TraceServiceServicer):
    """An OTLP trace collector that keeps what it is sent."""

    def __init__(self) -> None:
        self.requests: list[otlp.ExportTraceServiceRequest] = []

    async def Export(  # type: ignore[override]
        self, request: otlp.ExportTraceServiceRequest, context: object
    ) -> otlp.ExportTraceServiceResponse:
        self.requests.append(request)
        return otlp.ExportTraceServiceResponse()

    def spans(self) -> list[tuple[str, str]]:
        """(service.name, span name) of every span received."""
        found = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                service = next(
                    a.value.string_value
                    for a in resource_spans.resource.attributes
                    if a.key == "service.name"
                )
                for scope_spans in resource_spans.scope_spans:
                    found += [(service, span.name) for span in scope_spans.spans]
        return found


@pytest.fixture
async def collector() -> AsyncIterator[tuple[Collector, str]]:
    server = grpc.aio.server()
    keeper = Collector()
    otlp_grpc.add_TraceServiceServicer_to_server(keeper, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield keeper, f"http://127.0.0.1:{port}"
    await server.stop(None)


def test_tracing_is_off_without_an_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(OTLP_ENDPOINT_ENV, raising=False)
    assert job_settings([]).otlp_endpoint is None
    assert start_tracing("job-service", None) is None


@pytest.mark.parametrize("how", ["job-service flag", "ai-gateway flag", "environment"])
async def test_spans_go_to_the_otlp_collector_with_the_service_name(
    how: str, collector: tuple[Collector, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    keeper, url = collector
    monkeypatch.delenv(OTLP_ENDPOINT_ENV, raising=False)
    if how == "job-service flag":
        service, endpoint = "job-service", job_settings(["--otlp-endpoint", url]).otlp_endpoint
    elif how == "ai-gateway flag":
        service, endpoint = "ai-gateway", gateway_settings(["--otlp-endpoint", url]).otlp_endpoint
    else:
        monkeypatch.setenv(OTLP_ENDPOINT_ENV, url)
        service, endpoint = "job-service", None
    tracing = start_tracing(service, endpoint)
    assert tracing is not None
    with tracing.tracer.start_as_current_span("work"):
        pass
    await tracing.shutdown()  # flushes the batch
    assert keeper.spans() == [(service, "work")]


def test_a_shared_provider_is_used_and_left_to_its_owner() -> None:
    provider = TracerProvider()
    tracing = start_tracing("job-service", "http://127.0.0.1:1", provider)
    assert tracing is not None and tracing.provider is provider
    asyncio.run(tracing.shutdown())  # not the owner: the provider keeps working
    with tracing.tracer.start_as_current_span("still") as span:
        assert span.is_recording()


def test_trace_context_round_trips_and_bad_values_start_a_new_root() -> None:
    assert current_traceparent() is None and outgoing_metadata() == ()
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("child", context=context_of(TRACEPARENT)) as span:
        context = span.get_span_context()
        assert f"{context.trace_id:032x}" == TRACEPARENT.split("-")[1]
        here = current_traceparent()
        assert here is not None and here.split("-")[2] == f"{context.span_id:016x}"
        assert dict(outgoing_metadata())["traceparent"] == here
    for bad in ("", "garbage", TRACEPARENT + "-" + "0" * 300, None):
        assert context_of(bad) == {}
    assert incoming_context((("traceparent", "nope"),)) == {}
    assert incoming_context((("traceparent", b"\x00"),)) == {}
    assert incoming_context((("x-job-id", "j"), ("traceparent", TRACEPARENT))) != {}
