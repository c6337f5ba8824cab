"""`jobsctl failures` against real processes (the failing stack: the gateway always
answers UNAVAILABLE and job-service gives up after one attempt): failed jobs grouped
by code and message, as a table and as JSON; a range JobService refuses is one line
and exit 4 (invalid input)."""

from __future__ import annotations

import json
import time

import pytest
from conftest import Stack
from test_jobsctl import enqueue_card, jobsctl, one_line_error

pytestmark = pytest.mark.acceptance


def test_failures_are_grouped_with_counts(failing_stack: Stack) -> None:
    target = failing_stack.address
    ids = {enqueue_card(target, f"failures-{i}") for i in range(2)}
    deadline = time.monotonic() + 30
    while True:
        result = jobsctl(target, "failures", "--since", "1h", "--type", "card-analysis", "--json")
        assert result.returncode == 0, result.stderr
        body = json.loads(result.stdout)
        unavailable = [g for g in body["groups"] if g["errorCode"] == "UNAVAILABLE"]
        if unavailable and unavailable[0]["count"] >= 2:
            break
        assert time.monotonic() < deadline, body
        time.sleep(0.2)
    (group,) = unavailable
    assert group["messagePrefix"].startswith("AI gateway unavailable")
    assert body["messagePrefixLength"] == 80 and body["truncated"] is False
    listed = jobsctl(target, "list", "--status", "failed", "--all", "--json")
    failed = {job["id"] for job in json.loads(listed.stdout)["jobs"]}
    assert ids <= failed and group["exampleJobId"] in failed

    table = jobsctl(target, "failures")
    assert table.returncode == 0, table.stderr
    assert "UNAVAILABLE" in table.stdout and "AI gateway unavailable" in table.stdout


def test_a_range_over_31_days_is_refused_in_one_line(failing_stack: Stack) -> None:
    result = jobsctl(failing_stack.address, "failures", "--since", "40d")
    assert result.returncode == 4
    assert "failed_before" in one_line_error(result)
