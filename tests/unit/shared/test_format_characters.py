"""Unicode format characters (category Cf: U+202E RIGHT-TO-LEFT OVERRIDE and the other
bidi controls, zero-width characters, tags) are escaped wherever control characters
are: the log lines of both services (text and JSON) and every line a program prints.
Only free text shown to people keeps the two joiners that emoji and some scripts need."""

from __future__ import annotations

import json
import logging
import sys
import unicodedata

import pytest

from san_jobs.job_service.logformat import log_formatter
from san_jobs.shared import safe_text as safe_text_module
from san_jobs.shared.safe_text import escape_control, safe_text

# A target that would make its job's line read "... FAILED" instead of "... DELIAF".
RLO_TARGET = "scrap-\u202eDELIAF\u202c-1"
EVERY_CF = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"]


def test_every_format_character_of_this_python_is_escaped() -> None:
    # A newer Unicode (a Python upgrade) that adds one fails here: FORMAT_CHARACTERS is
    # written out, as scanning unicodedata at import costs a tenth of a second.
    text = "".join(EVERY_CF)
    escaped = escape_control(text)
    assert not any(char in escaped for char in EVERY_CF)
    assert escaped.count("\\") == len(EVERY_CF)
    assert escape_control("\u202e") == "\\u202e"
    assert escape_control("\U000e0041") == "\\U000e0041"  # a tag: beyond the BMP
    assert escape_control("\xad") == "\\xad"


def test_free_text_keeps_the_joiners_and_escapes_the_rest() -> None:
    kept = escape_control(
        "\U0001f469\u200d\U0001f4bb \u0645\u06cc\u200c\u062e\n", keep_newlines=True
    )
    assert kept == "\U0001f469\u200d\U0001f4bb \u0645\u06cc\u200c\u062e\n"
    escaped = escape_control("".join(EVERY_CF), keep_newlines=True)
    assert [char for char in EVERY_CF if char in escaped] == list(safe_text_module.JOINERS)
    # On one line (a log, an identifier) the joiners are escaped too.
    assert escape_control("a\u200db") == "a\\u200db"


def test_json_text_escapes_format_characters_losslessly() -> None:
    value = {"target_id": RLO_TARGET + "\U000e0041\u200d"}
    text = safe_text_module.escape_json_unsafe(json.dumps(value, ensure_ascii=False))
    assert not any(char in text for char in EVERY_CF)
    assert "\\u202e" in text and "\\udb40\\udc41" in text  # a surrogate pair, as JSON says
    assert json.loads(text) == value
    assert safe_text_module.escape_json_unsafe('{"a": "요약"}') == '{"a": "요약"}'


def test_safe_text_of_a_job_line() -> None:
    assert safe_text(f"job 1 target={RLO_TARGET} COMPLETED") == (
        "job 1 target=scrap-\\u202eDELIAF\\u202c-1 COMPLETED"
    )


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_job_service_log_lines_escape_format_characters(log_format: str) -> None:
    formatter = log_formatter(log_format, "i1")  # type: ignore[arg-type]
    record = logging.LogRecord(
        "job_service.worker", logging.INFO, __file__, 1,
        "job_id=%s target_id=%s completed", ("j-1", RLO_TARGET), None,
    )  # fmt: skip
    line = formatter.format(record)
    assert not any(char in line for char in EVERY_CF), line
    assert "scrap-\\u202eDELIAF\\u202c-1" in line
    if log_format == "json":
        assert RLO_TARGET in json.loads(line)["message"]
