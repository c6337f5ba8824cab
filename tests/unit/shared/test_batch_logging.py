"""san_jobs.shared.batch_logging.log_each: the same lines as logging each one, in both
--log-format text and json, written once per batch to a plain stream handler."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from san_jobs.job_service.logformat import log_formatter
from san_jobs.shared.batch_logging import log_each
from san_jobs.shared.trace_logging import install_trace_ids

MSG = "job_id=%s enqueued: %s target_id=%s by %s"
LINES = [
    ("0190-a", "CARD_ANALYSIS", "t-1", "alice"),
    ("0190-b", "TIL_GENERATION", "t\n2 forged line", "-"),  # a caller's value, escaped
    ("0190-c", "CARD_ANALYSIS", "postgresql://u:secret@db/x", "bob"),  # masked
]


class CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    logger = logging.getLogger("test_batch_logging")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    yield logger
    logger.handlers.clear()


def _handler(logger: logging.Logger, log_format: str) -> CountingStream:
    stream = CountingStream()
    handler = logging.StreamHandler(stream)
    install_trace_ids(handler)
    handler.setFormatter(log_formatter(log_format, "i-1"))  # type: ignore[arg-type]
    logger.handlers[:] = [handler]
    return stream


def _without_time(log_format: str, text: str) -> list[object]:
    lines = text.splitlines()
    if log_format == "json":
        return [{k: v for k, v in json.loads(line).items() if k != "ts"} for line in lines]
    return [line[len("2026-01-01 00:00:00,000 ") :] for line in lines]


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_the_same_lines_as_one_call_each_in_one_write(
    logger: logging.Logger, log_format: str
) -> None:
    one_by_one = _handler(logger, log_format)
    for args in LINES:
        logger.info(MSG, *args)
    batched = _handler(logger, log_format)
    log_each(logger, logging.INFO, MSG, LINES)

    assert batched.writes == 1
    assert one_by_one.writes == len(LINES)
    expected = _without_time(log_format, one_by_one.getvalue())
    assert _without_time(log_format, batched.getvalue()) == expected
    assert len(expected) == len(LINES)  # one line each: the newline was escaped
    if log_format == "json":
        assert [line["job_id"] for line in expected] == ["0190-a", "0190-b", "0190-c"]  # type: ignore[index]
    assert "secret" not in batched.getvalue()


def test_below_the_level_nothing_is_written(logger: logging.Logger) -> None:
    stream = _handler(logger, "text")
    logger.setLevel(logging.WARNING)
    log_each(logger, logging.INFO, MSG, LINES)
    assert stream.getvalue() == ""


def test_another_handler_gets_one_record_per_line(logger: logging.Logger) -> None:
    """A handler that is not a plain StreamHandler (here a capture, as pytest's) sees
    every line as its own record, exactly as logger.info would give it."""
    records: list[logging.LogRecord] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    stream = _handler(logger, "text")
    logger.addHandler(Capture())
    log_each(logger, logging.INFO, MSG, LINES)
    assert [r.getMessage() for r in records] == [MSG % args for args in LINES]
    assert stream.writes == len(LINES)


def test_propagates_to_the_parents_stream_handler() -> None:
    parent = logging.getLogger("test_batch_logging_parent")
    child = logging.getLogger("test_batch_logging_parent.child")
    parent.propagate = False
    parent.setLevel(logging.INFO)
    stream = _handler(parent, "text")
    try:
        log_each(child, logging.INFO, MSG, LINES[:2])
    finally:
        parent.handlers.clear()
    assert stream.writes == 1
    names = [line.split(": ", 1)[0].rsplit(" ", 1)[-1] for line in stream.getvalue().splitlines()]
    assert names == [child.name, child.name]
