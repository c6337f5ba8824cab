"""The cached-time log format prints exactly what logging's default would."""

from __future__ import annotations

import logging

from job_service.logformat import CachedTimeFormatter

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _record(created: float) -> logging.LogRecord:
    record = logging.LogRecord("job_service.app", logging.INFO, "", 0, "job_id=%s", ("j-1",), None)
    record.created = created
    record.msecs = (created - int(created)) * 1000
    return record


def test_same_text_as_the_default_formatter_across_seconds() -> None:
    cached, default = CachedTimeFormatter(FORMAT), logging.Formatter(FORMAT)
    for created in (
        1_764_576_000.001,
        1_764_576_000.999,
        1_764_576_001.0,
        1_764_576_001.5,
        1_764_576_000.2,
    ):
        record = _record(created)
        assert cached.format(record) == default.format(record)
