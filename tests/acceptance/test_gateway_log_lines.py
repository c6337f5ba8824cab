"""ai-gateway writes one line per record: a value shaped by a caller or an upstream
(a call id, an error text) cannot forge a line, reach the log raw, or show a URL's
password."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.acceptance

FORGED = "2026-01-01 00:00:00,000 INFO FAKE LINE"

# The gateway's own logging set-up, in a process of its own (it configures the root
# logger, as `ai-gateway` does at start), logging the value and a traceback quoting it.
SCRIPT = """\
import logging, os
from san_jobs.ai_gateway.cli import configure_logging
configure_logging("INFO")
value = os.environ["HOSTILE_VALUE"]
logging.getLogger("ai_gateway.stream").warning("call_id %s", value)
try:
    raise ValueError("upstream said " + value)
except ValueError:
    logging.getLogger("ai_gateway.calls").exception("call failed")
"""


def test_ai_gateway_log_lines_cannot_be_forged() -> None:
    value = f"x\n{FORGED}\x1b[2J\x9b https://u:S3cretPass@upstream.test/v1"
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HOSTILE_VALUE": value},
    )
    assert result.returncode == 0, result.stderr
    log = result.stderr
    for raw in ("\x1b", "\x9b", "S3cretPass"):
        assert raw not in log
    lines = log.splitlines()
    assert not [line for line in lines if line.startswith("2026-01-01")]
    assert lines[0].endswith(
        "call_id x\\n" + FORGED + "\\x1b[2J\\x9b https://u:***@upstream.test/v1"
    )
    assert lines[1].endswith("call failed")
    assert all(line.startswith("  ") for line in lines[2:])  # the traceback, indented
