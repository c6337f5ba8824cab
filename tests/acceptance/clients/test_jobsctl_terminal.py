"""jobsctl against real processes: what a job holds (here a cancel reason with ANSI
escapes) and what the server answers never reach the terminal as control bytes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Stack

from san_jobs.client import CardAnalysisInput, JobsClient

pytestmark = pytest.mark.acceptance

JOBSCTL = str(Path(sys.executable).parent / "jobsctl")
# Clear the screen (ESC [2J), the same as one C1 byte (CSI), and a line separator.
REASON = "esc-\x1b[2J csi-\x9b2J ls-\u2028 done"
RAW_CONTROLS = ("\x1b", "\x9b", "\u2028")


def jobsctl(target: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [JOBSCTL, "--target", target, *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def _assert_clean(result: subprocess.CompletedProcess[str]) -> None:
    for control in RAW_CONTROLS:
        assert control not in result.stdout + result.stderr, (control, result)


def test_get_and_list_print_no_control_character(slow_stack: Stack) -> None:
    target = slow_stack.address
    client = JobsClient(target, timeout=10)
    try:
        job = client.enqueue("scrap-terminal-1", CardAnalysisInput(text="A page.")).job
        client.cancel_job(job.id, reason=REASON)
    finally:
        client.close()

    shown = jobsctl(target, "get", job.id)
    assert shown.returncode == 0, shown.stderr
    _assert_clean(shown)
    assert "esc-\\x1b[2J" in shown.stdout  # shown, escaped

    as_json = jobsctl(target, "get", job.id, "--json")
    _assert_clean(as_json)
    assert json.loads(as_json.stdout)["cancelReason"] == REASON  # exact, for scripts

    listed = jobsctl(target, "list", "--target-id", "scrap-terminal-1")
    assert listed.returncode == 0, listed.stderr
    _assert_clean(listed)
    listed_json = jobsctl(target, "list", "--target-id", "scrap-terminal-1", "--json")
    _assert_clean(listed_json)
    assert json.loads(listed_json.stdout)["jobs"][0]["cancelReason"] == REASON
