"""OpenTelemetry traces for job-service and ai-gateway: the provider, the W3C trace
context carried between them, and a span for each RPC a server answers.

Off unless asked for: `start_tracing` returns None when neither --otlp-endpoint nor
the standard OTEL_EXPORTER_OTLP_ENDPOINT is set, and then nothing of this module runs
on the hot path (no interceptor is installed, no span is made; what remains is a
check of the current span, which without a provider is the API's invalid span).
When on, spans go to an OTLP gRPC collector through a BatchSpanProcessor (exported off
the event loop, in the processor's thread), under service.name `job-service` or
`ai-gateway`, flushed when the service stops.

How a trace travels (docs/operations.md, "Traces"):

- a caller's `traceparent` metadata is the parent of the server span of its RPC
  (`ServerTracingInterceptor`); a malformed one is ignored (the span is a new root),
  never an error;
- Enqueue stores the traceparent of its span with the job, and each attempt's span
  has it as its parent, however long the job waited and whichever instance runs it;
- the gateway call carries the attempt's context: as metadata on a unary call, in
  each call's own `traceparent` field on StreamCalls (helpers in
  san_jobs.shared.trace_context, which imports neither grpc nor the SDK).

The project's instrumentation is this module (a grpc.aio interceptor and explicit
injection) rather than opentelemetry-instrumentation-grpc: that package is not a
dependency, and a stream that carries many calls needs a context per call anyway.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager

import grpc
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from san_jobs.shared.rpc_observers import Ended, Handler, observed
from san_jobs.shared.trace_context import incoming_context

log = logging.getLogger("san_shared.tracing")

OTLP_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
# The instrumentation scope of every span the project makes.
SCOPE = "san-jobs"
# Health checks come every few seconds from every orchestrator probe: spans of them
# would bury the traces of real work.
UNTRACED_SERVICES = frozenset({"grpc.health.v1.Health"})


# -- the provider ---------------------------------------------------------------------


def otlp_endpoint(flag: str | None, environ: Mapping[str, str] = os.environ) -> str | None:
    """Where spans go: --otlp-endpoint, else OTEL_EXPORTER_OTLP_ENDPOINT; None: tracing off."""
    return flag or environ.get(OTLP_ENDPOINT_ENV) or None


def otlp_tracer_provider(service_name: str, endpoint: str) -> TracerProvider:
    """A provider exporting to the OTLP gRPC collector at `endpoint` in batches.

    `http://host:4317` speaks plain text, `https://...` TLS (the exporter's own rule;
    OTEL_EXPORTER_OTLP_* variables for headers, certificates and timeouts apply)."""
    # Imported here: the exporter pulls in its own gRPC stubs, needed only when on.
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    return provider


class Tracing:
    """A service's tracing: its tracer, and the provider to flush at stop."""

    def __init__(self, provider: TracerProvider, *, owned: bool) -> None:
        """`owned`: the service made `provider` and shuts it down at stop (a test's
        provider, shared by several servers, is left to the test)."""
        self.provider = provider
        self.tracer: Tracer = provider.get_tracer(SCOPE)
        self._owned = owned

    def interceptor(self) -> ServerTracingInterceptor:
        return ServerTracingInterceptor(self.tracer)

    async def shutdown(self) -> None:
        """Export the spans still queued and stop (when the service owns the provider).
        In a thread: the exporter's last batch may wait on the network."""
        if self._owned:
            await asyncio.to_thread(self.provider.shutdown)


def start_tracing(
    service_name: str, endpoint_flag: str | None, provider: TracerProvider | None = None
) -> Tracing | None:
    """The service's tracing: over `provider` when given (tests), else an OTLP
    provider when an endpoint is configured (see `otlp_endpoint`); None: off."""
    if provider is not None:
        return Tracing(provider, owned=False)
    endpoint = otlp_endpoint(endpoint_flag)
    if endpoint is None:
        return None
    log.info("traces go to the OTLP collector at %s as %s", endpoint, service_name)
    return Tracing(otlp_tracer_provider(service_name, endpoint), owned=True)


# -- a span for each RPC ----------------------------------------------------------------


def _end_rpc(span: Span, code: grpc.StatusCode) -> None:
    span.set_attribute("rpc.grpc.status_code", code.value[0])
    if code is not grpc.StatusCode.OK:
        span.set_status(Status(StatusCode.ERROR, code.name))


class ServerTracingInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """A SERVER span around each RPC (but health checks): named by the full method
    (`san.jobs.v1.JobService/Enqueue`), with rpc.system, rpc.service, rpc.method and
    rpc.grpc.status_code, status ERROR when the code is not OK; the child of the
    caller's `traceparent` when it sent a valid one. Install it first (outermost), so
    that calls refused by later interceptors (authentication) have their span too."""

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler:
        handler = await continuation(handler_call_details)
        full_method = handler_call_details.method
        service, _, method = full_method.lstrip("/").partition("/")
        if handler is None or service in UNTRACED_SERVICES:
            return handler
        name = f"{service}/{method}"
        attributes = {"rpc.system": "grpc", "rpc.service": service, "rpc.method": method}
        metadata = handler_call_details.invocation_metadata
        tracer = self._tracer

        @contextmanager
        def rpc_span() -> Iterator[Ended]:
            with tracer.start_as_current_span(
                name,
                context=incoming_context(metadata),
                kind=SpanKind.SERVER,
                attributes=attributes,
                record_exception=False,
                set_status_on_exception=False,
            ) as span:
                yield functools.partial(_end_rpc, span)

        return observed(handler, rpc_span)
