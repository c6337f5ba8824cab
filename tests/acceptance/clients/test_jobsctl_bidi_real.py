"""Against real processes: a job's text holding U+202E RIGHT-TO-LEFT OVERRIDE is shown
by jobsctl with the override escaped (and exact in --json), and JobService refuses it
in a target_id as INVALID_ARGUMENT naming the field."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Stack

from san_jobs.client import CardAnalysisInput, InvalidRequestError, JobsClient

pytestmark = pytest.mark.acceptance

JOBSCTL = str(Path(sys.executable).parent / "jobsctl")
# Read raw, the line would end "... DELIAF" shown as "FAILED".
REASON = "operator note \u202eDELIAF\u202c"


def jobsctl(target: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [JOBSCTL, "--target", target, *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_jobsctl_shows_a_format_character_escaped_and_job_service_refuses_it_in_a_target(
    slow_stack: Stack,
) -> None:
    client = JobsClient(slow_stack.address, timeout=10)
    try:
        job = client.enqueue("scrap-format-1", CardAnalysisInput(text="A page.")).job
        client.cancel_job(job.id, reason=REASON)  # free text: kept as sent
    finally:
        client.close()

    shown = jobsctl(slow_stack.address, "get", job.id)
    assert shown.returncode == 0, shown.stderr
    assert "\u202e" not in shown.stdout + shown.stderr
    assert "operator note \\u202eDELIAF\\u202c" in shown.stdout

    as_json = jobsctl(slow_stack.address, "get", job.id, "--json")
    assert "\u202e" not in as_json.stdout
    assert json.loads(as_json.stdout)["cancelReason"] == REASON

    client = JobsClient(slow_stack.address, timeout=10)
    try:
        with pytest.raises(InvalidRequestError) as caught:
            client.enqueue("scrap-\u202eDELIAF\u202c-1", CardAnalysisInput(text="A page."))
        assert [v.field for v in caught.value.field_violations] == ["target_id"]
    finally:
        client.close()
