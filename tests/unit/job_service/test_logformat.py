"""The cached-time log format prints exactly what logging's default would."""

from __future__ import annotations

import logging

import pytest

from san_jobs.job_service.logformat import CachedTimeFormatter
from san_jobs.shared.safe_text import escape_control, mask_secrets

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


# -- one record, one line -------------------------------------------------------------


def _format(message: str, *args: object, exc: BaseException | None = None) -> str:
    record = logging.LogRecord(
        "job_service.app",
        logging.INFO,
        "",
        0,
        message,
        args,
        (type(exc), exc, exc.__traceback__) if exc is not None else None,
    )
    return CachedTimeFormatter(FORMAT).format(record)


def test_a_newline_in_a_value_cannot_forge_a_record() -> None:
    line = _format("job_id=%s cancelled: %s", "j-1", "x\n2026-01-01 00:00:00,000 INFO FAKE LINE")
    assert "\n" not in line
    assert line.endswith("cancelled: x\\n2026-01-01 00:00:00,000 INFO FAKE LINE")


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("\x00", "\\x00"),
        ("\r", "\\r"),
        ("\t", "\\t"),
        ("\x1b[2J", "\\x1b[2J"),
        ("\x7f", "\\x7f"),
        ("\x85", "\\x85"),
        ("\x9b2J", "\\x9b2J"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
        ("\ud800", "\\ud800"),
    ],
)
def test_control_characters_are_escaped(value: str, shown: str) -> None:
    assert _format("by %s", f"a{value}b").endswith(f"by a{shown}b")


def test_plain_text_is_left_as_is() -> None:
    text = "요약 완료: job_id=j-1 by web (C:\\path) 100% ✓"
    assert _format("%s", text).endswith(text)


def test_a_traceback_stays_readable_and_cannot_forge_a_record() -> None:
    try:
        raise ValueError("bad value\n2026-01-01 00:00:00,000 INFO FAKE LINE")
    except ValueError as error:
        text = _format("job_id=%s: unexpected error", "j-1", exc=error)
    first, *rest = text.split("\n")
    assert first.endswith("job_id=j-1: unexpected error")
    assert rest[0] == "  Traceback (most recent call last):"
    # Every traceback line, the exception message's own lines too, is indented: no
    # line of it starts like a record.
    assert all(line.startswith("  ") for line in rest)
    assert rest[-2:] == ["  ValueError: bad value", "  2026-01-01 00:00:00,000 INFO FAKE LINE"]


def test_database_passwords_are_masked_in_messages_and_tracebacks() -> None:
    url = "postgresql+asyncpg://svc:S3cretPass@db.internal:5432/jobs"
    try:
        raise ConnectionError(f"cannot connect to {url}")
    except ConnectionError as error:
        text = _format("database at %s is down", url, exc=error)
    assert "S3cretPass" not in text
    assert text.count("postgresql+asyncpg://svc:***@db.internal:5432/jobs") == 2


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("postgresql://svc:S3cretPass@h/db", "postgresql://svc:***@h/db"),
        ("got 'postgresql://svc:S3cretPass@h:1/db'", "got 'postgresql://svc:***@h:1/db'"),
        # An unencoded "@" or "/" in the password: mask to the URL's last "@".
        ("postgresql+asyncpg://svc:S3c@ret/Pass@h/db", "postgresql+asyncpg://svc:***@h/db"),
        ("redis://:S3cretPass@h:6379", "redis://:***@h:6379"),
        ("host=h user=svc password=S3cretPass dbname=x", "host=h user=svc password=*** dbname=x"),
        # Nothing to mask:
        ("postgresql+asyncpg://svc@h:5432/db", "postgresql+asyncpg://svc@h:5432/db"),
        ("https://api.example.com:443/v1 by a@b.example",) * 2,
    ],
)
def test_mask_secrets(text: str, masked: str) -> None:
    assert mask_secrets(text) == masked


def test_escape_control_can_keep_newlines_for_multi_line_text() -> None:
    assert escape_control("a\nb\x1b[2J", keep_newlines=True) == "a\nb\\x1b[2J"
    assert escape_control("a\nb") == "a\\nb"
