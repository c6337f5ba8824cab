"""Log lines carry the trace id of the current span (san_jobs.shared.trace_logging), and
only then: a line outside any span is exactly the line it always was."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider

from san_jobs.job_service.logformat import CachedTimeFormatter
from san_jobs.shared.json_logs import JsonFormatter
from san_jobs.shared.trace_logging import TraceIdFilter, install_trace_ids

FORMAT = "%(levelname)s job-service[i-1] %(name)s: %(message)s"


@pytest.fixture
def lines() -> Iterator[tuple[logging.Logger, io.StringIO, logging.Handler]]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(CachedTimeFormatter(FORMAT))
    install_trace_ids(handler)
    logger = logging.getLogger("test.trace_logging")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    yield logger, out, handler
    logger.removeHandler(handler)


def test_a_line_inside_a_span_ends_with_its_trace_id(
    lines: tuple[logging.Logger, io.StringIO, logging.Handler],
) -> None:
    logger, out, _ = lines
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("work") as span:
        logger.info("job_id=%s completed", "j-1")
    trace_id = f"{span.get_span_context().trace_id:032x}"
    assert out.getvalue() == (
        f"INFO job-service[i-1] test.trace_logging: job_id=j-1 completed trace_id={trace_id}\n"
    )


def test_a_line_outside_any_span_is_unchanged(
    lines: tuple[logging.Logger, io.StringIO, logging.Handler],
) -> None:
    logger, out, _ = lines
    logger.info("job_id=%s completed", "j-1")
    assert out.getvalue() == "INFO job-service[i-1] test.trace_logging: job_id=j-1 completed\n"


def test_the_filter_is_installed_once_and_the_json_format_reads_it(
    lines: tuple[logging.Logger, io.StringIO, logging.Handler],
) -> None:
    logger, out, handler = lines
    install_trace_ids(handler)
    assert sum(isinstance(f, TraceIdFilter) for f in handler.filters) == 1
    handler.setFormatter(JsonFormatter("job-service", "i-1"))
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("work") as span:
        logger.info("traced")
    logger.info("plain")
    traced, plain = (json.loads(line) for line in out.getvalue().splitlines())
    assert traced["trace_id"] == f"{span.get_span_context().trace_id:032x}"
    assert "trace_id" not in plain


def test_both_services_install_the_filter_on_their_handler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from san_jobs.ai_gateway import cli as gateway_cli
    from san_jobs.job_service import server as job_server
    from san_jobs.job_service.settings import JobServiceSettings

    handlers: list[logging.Handler] = []

    def keep(**kwargs: object) -> None:
        handlers.extend(kwargs["handlers"])  # type: ignore[call-overload]

    monkeypatch.setattr(logging, "basicConfig", keep)
    job_server.configure_logging(JobServiceSettings())
    gateway_cli.configure_logging("INFO")
    assert len(handlers) == 2
    for handler in handlers:
        assert any(isinstance(f, TraceIdFilter) for f in handler.filters)
