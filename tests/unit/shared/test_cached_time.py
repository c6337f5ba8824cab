"""Both services' text log lines use the one cached-time formatter
(san_jobs.shared.cached_time): the date is formatted once a second, the text is the
default formatter's."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from san_jobs.ai_gateway import cli as gateway_cli
from san_jobs.ai_gateway.cli import LOG_FORMAT
from san_jobs.job_service.logformat import log_formatter
from san_jobs.shared.cached_time import CachedTimeFormatter


def test_the_gateway_text_format_caches_the_time(monkeypatch: pytest.MonkeyPatch) -> None:
    handlers: list[logging.Handler] = []

    def keep(**kwargs: Any) -> None:
        handlers.extend(kwargs["handlers"])

    monkeypatch.setattr(logging, "basicConfig", keep)
    gateway_cli.configure_logging("INFO")
    (handler,) = handlers
    assert isinstance(handler.formatter, CachedTimeFormatter)
    assert isinstance(log_formatter("text", "i-1"), CachedTimeFormatter)


def test_a_call_log_line_reads_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    cached, default = CachedTimeFormatter(LOG_FORMAT), logging.Formatter(LOG_FORMAT)
    records = []
    for created in (1_764_576_000.25, 1_764_576_000.5, 1_764_576_000.75, 1_764_576_001.0):
        record = logging.LogRecord(
            "ai_gateway.calllog", logging.INFO, "", 0, "call %s ok", ("c-1",), None
        )
        record.created, record.msecs = created, (created - int(created)) * 1000
        records.append(record)
    expected = [default.format(r) for r in records]
    formatted: list[str] = []
    real_strftime = time.strftime

    def counted(fmt: str, *args: Any) -> str:
        formatted.append(fmt)
        return real_strftime(fmt, *args)

    monkeypatch.setattr(time, "strftime", counted)
    assert [cached.format(r) for r in records] == expected
    assert len(formatted) == 2  # once per second seen, not once per line
