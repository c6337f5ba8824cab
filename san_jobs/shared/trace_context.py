"""The W3C trace context (`traceparent`) as the services carry it: stored with a job,
sent as gRPC metadata, read back into an OpenTelemetry context. Only the API and its
W3C propagator: no grpc, no SDK (the worker and the gateway's call path use it, and
their layers import no grpc); san_jobs.shared.tracing holds the rest.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
# A traceparent longer than this is not looked at (version 00 is exactly 55
# characters; later versions may append fields): a bound on untrusted input.
MAX_TRACEPARENT_CHARS = 256

_PROPAGATOR = TraceContextTextMapPropagator()


def current_traceparent() -> str | None:
    """The `traceparent` of the current span (what a job stores), or None without one."""
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get(TRACEPARENT)


def context_of(traceparent: str | None) -> Context:
    """A context whose remote parent is `traceparent`; an empty one (a span started in
    it is a new root) when it is None, too long or malformed."""
    if not traceparent or len(traceparent) > MAX_TRACEPARENT_CHARS:
        return Context()
    return _PROPAGATOR.extract({TRACEPARENT: traceparent}, context=Context())


def outgoing_metadata() -> tuple[tuple[str, str], ...]:
    """The current span's trace context as gRPC metadata (`traceparent`, and
    `tracestate` when there is one); () without a current span."""
    if not trace.get_current_span().get_span_context().is_valid:
        return ()
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return tuple(carrier.items())


def incoming_context(metadata: Any) -> Context:
    """The trace context a caller sent in its metadata; empty (a new root) without a
    valid one."""
    carrier: dict[str, str] = {}
    for key, value in metadata or ():
        if (
            key in (TRACEPARENT, TRACESTATE)
            and isinstance(value, str)
            and key not in carrier
            and len(value) <= MAX_TRACEPARENT_CHARS * 2
        ):
            carrier[key] = value
    if TRACEPARENT not in carrier:
        return Context()
    return _PROPAGATOR.extract(carrier, context=Context())
