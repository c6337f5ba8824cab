"""--log-format json (san_jobs.shared.json_logs): one JSON object per record, one record
per line, with the fields log collectors index, secrets masked as in text logs."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from san_jobs.ai_gateway.cli import build_parser as gateway_parser
from san_jobs.job_service.cli import build_parser as job_service_parser
from san_jobs.job_service.logformat import CachedTimeFormatter, log_formatter
from san_jobs.shared.json_logs import JsonFormatter

JOB_ID = "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
CREATED = 1_764_576_000.0425  # 2025-12-01T08:00:00.042Z


def _record(
    message: str,
    *args: object,
    exc: BaseException | None = None,
    level: int = logging.INFO,
    **extra: object,
) -> logging.LogRecord:
    record = logging.LogRecord(
        "job_service.worker",
        level,
        "",
        0,
        message,
        args,
        (type(exc), exc, exc.__traceback__) if exc is not None else None,
    )
    record.created = CREATED
    record.msecs = (CREATED - int(CREATED)) * 1000
    record.__dict__.update(extra)
    return record


def _line(record: logging.LogRecord) -> str:
    return JsonFormatter("job-service", "host-1-abc").format(record)


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    line = _line(record)
    assert "\n" not in line and "\r" not in line
    parsed: dict[str, Any] = json.loads(line)
    return parsed


def test_the_fields_of_a_line() -> None:
    assert _fields(_record("job_id=%s claimed: %s", JOB_ID, "CARD_ANALYSIS")) == {
        "ts": "2025-12-01T08:00:00.042Z",
        "level": "INFO",
        "logger": "job_service.worker",
        "service": "job-service",
        "instance": "host-1-abc",
        "message": f"job_id={JOB_ID} claimed: CARD_ANALYSIS",
        "job_id": JOB_ID,
    }


def test_no_job_id_no_trace_id_no_exc_when_there_is_none() -> None:
    fields = _fields(_record("job-service listening on %s", "127.0.0.1:1", level=logging.WARNING))
    assert fields["level"] == "WARNING"
    assert not {"job_id", "trace_id", "exc"} & fields.keys()


def test_a_job_id_given_as_an_attribute_wins_over_the_message() -> None:
    # The gateway's call log says "job=<id>"; it passes the id as extra={"job_id": ...}.
    fields = _fields(_record("Summarize caller=web job=%s", JOB_ID, job_id=JOB_ID))
    assert fields["job_id"] == JOB_ID


def test_the_trace_id_when_a_filter_set_one() -> None:
    assert _fields(_record("x", trace_id="4bf92f3577b34da6a3ce929d0e0e4736"))["trace_id"] == (
        "4bf92f3577b34da6a3ce929d0e0e4736"
    )
    assert "trace_id" not in _fields(_record("x", trace_id=""))


def test_a_traceback_is_one_field_of_one_line() -> None:
    try:
        raise ValueError("bad value\n2026-01-01 00:00:00,000 INFO FAKE LINE")
    except ValueError as error:
        fields = _fields(_record("job_id=%s: unexpected error", JOB_ID, exc=error))
    assert fields["message"] == f"job_id={JOB_ID}: unexpected error"
    assert fields["exc"].startswith("Traceback (most recent call last):\n")
    assert fields["exc"].endswith("ValueError: bad value\n2026-01-01 00:00:00,000 INFO FAKE LINE")


def test_database_passwords_are_masked_in_the_message_and_the_traceback() -> None:
    url = "postgresql+asyncpg://svc:S3cretPass@db.internal:5432/jobs"
    try:
        raise ConnectionError(f"cannot connect to {url}")
    except ConnectionError as error:
        line = _line(_record("database at %s is down", url, exc=error))
    assert "S3cretPass" not in line
    fields = json.loads(line)
    assert "svc:***@db.internal" in fields["message"]
    assert "svc:***@db.internal" in fields["exc"]


@pytest.mark.parametrize(
    "value", ["\n", "\r", "\x00", "\x1b[2J", "\x7f", "\x85", "\x9b", "\u2028", "\u2029", "\ud800"]
)
def test_control_and_line_breaking_characters_are_escaped_and_come_back(value: str) -> None:
    text = f"a{value}b"
    line = _line(_record("cancelled: %s", text))
    assert line.isprintable()
    line.encode("utf-8")  # a lone surrogate would make the stream drop the line
    assert json.loads(line)["message"] == f"cancelled: {text}"
    # str.splitlines() breaks on NEL and U+2028 too: still one line.
    assert len(line.splitlines()) == 1


def test_other_text_stays_readable() -> None:
    text = "요약 완료: by web (C:\\path) 100% ✓"
    line = _line(_record("%s", text))
    assert "요약 완료" in line
    assert json.loads(line)["message"] == text


def test_the_clock_across_seconds() -> None:
    formatter = JsonFormatter("ai-gateway")
    for created, shown in [
        (1_764_576_000.999, "2025-12-01T08:00:00.999Z"),
        (1_764_576_001.0, "2025-12-01T08:00:01.000Z"),
        (1_764_575_999.5, "2025-12-01T07:59:59.500Z"),
    ]:
        record = _record("x")
        record.created, record.msecs = created, (created - int(created)) * 1000
        fields = json.loads(formatter.format(record))
        assert fields["ts"] == shown
        assert "instance" not in fields


def test_job_service_picks_its_formatter_by_log_format() -> None:
    assert isinstance(log_formatter("json", "i-1"), JsonFormatter)
    text = log_formatter("text", "i-1")
    assert isinstance(text, CachedTimeFormatter)
    assert " job-service[i-1] job_service.worker: x" in text.format(_record("x"))


@pytest.mark.parametrize(
    ("parser", "prog"), [(job_service_parser, "job-service"), (gateway_parser, "ai-gateway")]
)
def test_an_unknown_log_format_is_one_line_and_exit_2(
    parser: Any, prog: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parser().parse_args(["--log-format", "xml"])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--log-format" in err[0] and "xml" in err[0], err
