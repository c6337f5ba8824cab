"""The trace id in log lines: `TraceIdFilter` sets ``record.trace_id`` on every record
a handler sees, the current span's trace id as 32 hex digits, or "" when no span is
current (tracing off, or a line outside any traced work).

The text format (san_jobs.shared.safe_text.SafeFormatter) appends `` trace_id=<hex>`` when
there is one and leaves the line exactly as before when not; the JSON format
(san_jobs.shared.json_logs) writes a ``trace_id`` field. A filter rather than a formatter:
both formats read the same attribute, and it is set once per record.
"""

from __future__ import annotations

import logging

from opentelemetry import trace

TRACE_ID_ATTRIBUTE = "trace_id"


def current_trace_id() -> str:
    """The current span's trace id (32 lowercase hex digits), or "" without one."""
    # Without a span, get_current_span() is INVALID_SPAN, whose context is not valid:
    # one context-variable read, a few hundred nanoseconds.
    span_context = trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return ""
    return trace.format_trace_id(span_context.trace_id)


class TraceIdFilter(logging.Filter):
    """Sets ``record.trace_id`` (see the module docstring); lets every record through."""

    def filter(self, record: logging.LogRecord) -> bool:
        # A record may pass several handlers: the first one's value stands.
        if not getattr(record, TRACE_ID_ATTRIBUTE, ""):
            setattr(record, TRACE_ID_ATTRIBUTE, current_trace_id())
        return True


def install_trace_ids(handler: logging.Handler) -> None:
    """Have `handler`'s records carry the current trace id (once per handler)."""
    if not any(isinstance(f, TraceIdFilter) for f in handler.filters):
        handler.addFilter(TraceIdFilter())
