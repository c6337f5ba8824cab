"""san-web's log lines: uvicorn's format, one line per record whatever it holds."""

from __future__ import annotations

import logging
from typing import Any

from san_jobs.web._logging import safe_log_config

FORGED = "INFO:     FAKE LINE"


def _formatter(name: str) -> logging.Formatter:
    spec: dict[str, Any] = dict(safe_log_config("info")["formatters"][name])
    factory = spec.pop("()")
    formatter = factory(**spec)
    assert isinstance(formatter, logging.Formatter)
    return formatter


def test_an_error_line_with_a_newline_and_a_traceback_cannot_forge_a_record() -> None:
    try:
        raise RuntimeError(f"bad\n{FORGED}")
    except RuntimeError as error:
        record = logging.LogRecord(
            "uvicorn.error", logging.ERROR, "", 0, "Exception: %s", (f"x\n{FORGED}\x1b[2J",),
            (RuntimeError, error, error.__traceback__),
        )  # fmt: skip
    lines = _formatter("default").format(record).split("\n")
    assert lines[0] == f"ERROR:    Exception: x\\n{FORGED}\\x1b[2J"
    assert all(line.startswith("  ") for line in lines[1:])


def test_an_access_line_with_a_decoded_newline_stays_one_line() -> None:
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, "", 0, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "GET", f"/a\n{FORGED}\x9b", "1.1", 404), None,
    )  # fmt: skip
    line = _formatter("access").format(record)
    assert line == f'INFO:     127.0.0.1:5000 - "GET /a\\n{FORGED}\\x9b HTTP/1.1" 404 Not Found'


def test_other_loggers_share_the_escaping_handler() -> None:
    config = safe_log_config("warning")
    assert config["root"] == {"handlers": ["default"], "level": logging.WARNING}
    assert config["formatters"]["default"]["use_colors"] is False
