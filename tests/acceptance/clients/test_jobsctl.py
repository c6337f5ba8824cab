"""jobsctl as a subprocess against real ai-gateway and job-service processes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import Stack

from san_jobs.client import CardAnalysisInput, JobsClient, JobStatus

pytestmark = pytest.mark.acceptance

JOBSCTL = str(Path(sys.executable).parent / "jobsctl")
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
TEXT = (
    "Server-Sent Events let a server push updates to a browser over plain HTTP. "
    "The browser reconnects by itself. Many dashboards use them for live progress."
)


def jobsctl(target: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [JOBSCTL, "--target", target, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """The failure was told in one clear line on stderr, without a traceback."""
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("jobsctl"), lines
    return lines[0]


def enqueue_card(target: str, target_id: str, *extra: str) -> str:
    result = jobsctl(
        target, "enqueue", "card-analysis", "--target-id", target_id, "--text", TEXT, *extra
    )
    assert result.returncode == 0, result.stderr
    job_id = result.stdout.strip()
    assert UUID.match(job_id), result.stdout  # just the id: JOB=$(jobsctl enqueue ...) works
    return job_id


def test_enqueue_watch_get_list_stats(ok_stack: Stack) -> None:
    target = ok_stack.address
    job_id = enqueue_card(target, "scrap-cli-1", "--title", "SSE", "--url", "https://sse.test")

    watched = jobsctl(target, "watch", job_id)
    assert watched.returncode == 0, watched.stderr
    lines = watched.stdout.splitlines()
    status_lines = [line for line in lines if re.match(r"^\d{4}-\d\d-\d\dT", line)]
    assert status_lines, watched.stdout
    assert "COMPLETED" in status_lines[-1]
    assert "attempt 1/" in status_lines[-1]
    assert any(line.startswith("summary: ") and len(line) > 20 for line in lines), lines
    assert any(line.startswith("tags: ") for line in lines)

    shown = jobsctl(target, "get", job_id)
    assert shown.returncode == 0
    assert job_id in shown.stdout and "COMPLETED" in shown.stdout and "summary" in shown.stdout

    as_json = json.loads(jobsctl(target, "get", job_id, "--json").stdout)
    assert as_json["id"] == job_id
    assert as_json["status"] == "JOB_STATUS_COMPLETED"
    assert as_json["targetId"] == "scrap-cli-1"
    assert as_json["cardAnalysisResult"]["summary"]

    listed = json.loads(
        jobsctl(
            target, "--json", "list", "--target-id", "scrap-cli-1", "--status", "completed"
        ).stdout
    )
    assert [job["id"] for job in listed["jobs"]] == [job_id]
    table = jobsctl(target, "list", "--type", "card-analysis", "--since", "1h")
    assert table.returncode == 0 and job_id in table.stdout
    nothing = json.loads(
        jobsctl(target, "list", "--json", "--status", "failed", "--target-id", "scrap-cli-1").stdout
    )
    assert nothing["jobs"] == []

    stats = jobsctl(target, "stats")
    assert stats.returncode == 0
    assert "CARD_ANALYSIS" in stats.stdout and "oldest pending job" in stats.stdout
    counts = json.loads(jobsctl(target, "stats", "--json").stdout)["counts"]
    completed = [
        c for c in counts if c["jobType"] == "CARD_ANALYSIS" and c["status"] == "COMPLETED"
    ]
    assert completed and completed[0]["count"] >= 1


def test_til_and_recall_jobs_and_paging(ok_stack: Stack) -> None:
    target = ok_stack.address
    til = jobsctl(
        target, "enqueue", "til-generation", "--target-id", "2026-11-29", "--day", "2026-11-29",
        "--note", "Learned how gRPC deadlines propagate.", "--note", "SSE needs no websocket.",
    )  # fmt: skip
    assert til.returncode == 0, til.stderr
    recall = jobsctl(
        target, "enqueue", "recall-generation", "--target-id", "recall-1",
        "--source-text", TEXT, "--question-count", "2",
    )  # fmt: skip
    assert recall.returncode == 0, recall.stderr
    til_done = jobsctl(target, "watch", til.stdout.strip(), "--json")
    assert til_done.returncode == 0, til_done.stderr
    final = json.loads(til_done.stdout.splitlines()[-1])
    assert final["status"] == "JOB_STATUS_COMPLETED" and final["tilGenerationResult"]["body"]
    recall_done = jobsctl(target, "watch", recall.stdout.strip())
    assert recall_done.returncode == 0 and "Q1" in recall_done.stdout

    first = json.loads(jobsctl(target, "list", "--json", "--page-size", "1").stdout)
    assert len(first["jobs"]) == 1 and first["nextPageToken"]
    second = json.loads(
        jobsctl(
            target, "list", "--json", "--page-size", "1", "--page-token", first["nextPageToken"]
        ).stdout
    )
    assert len(second["jobs"]) == 1 and second["jobs"][0]["id"] != first["jobs"][0]["id"]
    everything = json.loads(jobsctl(target, "list", "--json", "--page-size", "1", "--all").stdout)
    assert len(everything["jobs"]) >= 2 and everything["nextPageToken"] == ""


def test_the_pipeline_by_ids_alone_against_a_real_job_service(ok_stack: Stack) -> None:
    """Issue 43: `enqueue til-generation --after CARD...` without --note and `enqueue
    recall-generation --after TIL` without --source-text, against real processes:
    JobService gives the TIL the cards' summaries and the recall the TIL's note."""
    target = ok_stack.address
    cards = [enqueue_card(target, f"pipeline-{i}") for i in range(2)]
    til = jobsctl(
        target, "enqueue", "til-generation", "--target-id", "pipeline-day",
        "--day", "2026-12-07", "--after", cards[0], "--after", cards[1],
    )  # fmt: skip
    assert til.returncode == 0, til.stderr
    recall = jobsctl(
        target, "enqueue", "recall-generation", "--target-id", "pipeline-quiz",
        "--after", til.stdout.strip(), "--question-count", "2",
    )  # fmt: skip
    assert recall.returncode == 0, recall.stderr
    done = jobsctl(target, "watch", recall.stdout.strip(), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["status"] == "JOB_STATUS_COMPLETED"
    summaries = [
        json.loads(jobsctl(target, "get", card, "--json").stdout)["cardAnalysisResult"]["summary"]
        for card in cards
    ]
    til_job = json.loads(jobsctl(target, "get", til.stdout.strip(), "--json").stdout)
    assert sorted(til_job["tilGenerationInput"]["notes"]) == sorted(summaries)
    recall_job = json.loads(jobsctl(target, "get", recall.stdout.strip(), "--json").stdout)
    (source,) = recall_job["recallGenerationInput"]["sources"]
    assert source["jobId"] == til_job["id"]
    assert source["text"] == til_job["tilGenerationResult"]["body"]
    assert recall_job["recallGenerationResult"]["questions"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--bogus", "list"], "unrecognized arguments: --bogus"),
        (["frobnicate"], "invalid choice"),
        (["enqueue", "card-analysis", "--target-id", "x"], "--text"),
        (["list", "--status", "weird"], "unknown status"),
        (["list", "--since", "yesterday-ish"], "cannot read time"),
        (["retry-failed"], "--all-failed"),
    ],
)
def test_usage_errors_exit_2(ok_stack: Stack, args: list[str], needle: str) -> None:
    result = jobsctl(ok_stack.address, *args)
    assert result.returncode == 2
    assert needle in one_line_error(result)


def test_unknown_and_malformed_ids(ok_stack: Stack) -> None:
    missing = jobsctl(ok_stack.address, "get", "00000000-0000-4000-8000-000000000000")
    assert missing.returncode == 3
    assert "not found" in one_line_error(missing)
    assert (
        jobsctl(ok_stack.address, "watch", "00000000-0000-4000-8000-000000000000").returncode == 3
    )
    assert (
        jobsctl(ok_stack.address, "cancel", "00000000-0000-4000-8000-000000000000").returncode == 3
    )
    malformed = jobsctl(ok_stack.address, "get", "not-a-uuid")
    assert malformed.returncode == 4
    assert "not a UUID" in one_line_error(malformed)
    blank = jobsctl(ok_stack.address, "enqueue", "card-analysis", "--target-id", " ", "--text", "x")
    assert blank.returncode == 4
    assert "target_id" in one_line_error(blank)


@pytest.mark.parametrize(
    "command", [["list"], ["get", "00000000-0000-4000-8000-000000000000"], ["stats"]]
)
def test_unreachable_server_exits_5(dead_address: str, command: list[str]) -> None:
    result = jobsctl(dead_address, *command)
    assert result.returncode == 5
    assert f"cannot reach JobService at {dead_address}" in one_line_error(result)


def test_duplicate_return_existing_cancel(slow_stack: Stack) -> None:
    target = slow_stack.address
    job_id = enqueue_card(target, "scrap-dup")
    duplicate = jobsctl(
        target, "enqueue", "card-analysis", "--target-id", "scrap-dup", "--text", TEXT
    )
    assert duplicate.returncode == 4
    assert job_id in one_line_error(duplicate)
    as_json = jobsctl(
        target, "--json", "enqueue", "card-analysis", "--target-id", "scrap-dup", "--text", TEXT
    )
    assert as_json.returncode == 4
    error = json.loads(as_json.stdout)["error"]
    assert error["code"] == "ALREADY_EXISTS" and error["metadata"]["existingJobId"] == job_id
    again = jobsctl(
        target,
        "enqueue",
        "card-analysis",
        "--target-id",
        "scrap-dup",
        "--text",
        TEXT,
        "--return-existing",
    )
    assert again.returncode == 0 and again.stdout.strip() == job_id

    cancelled = jobsctl(target, "cancel", job_id, "--reason", "test")
    assert cancelled.returncode == 0 and job_id in cancelled.stdout
    watched = jobsctl(target, "watch", job_id)
    assert watched.returncode == 1
    assert "CANCELLED" in watched.stdout
    finished = jobsctl(target, "cancel", job_id)
    assert finished.returncode == 4
    assert "CANCELLED" in one_line_error(finished)


def test_failed_job_watch_and_retry(failing_stack: Stack) -> None:
    target = failing_stack.address
    job_id = enqueue_card(target, "scrap-fail-1")
    watched = jobsctl(target, "watch", job_id)
    assert watched.returncode == 1
    assert "FAILED" in watched.stdout and "AI gateway unavailable" in watched.stdout

    failed = json.loads(
        jobsctl(
            target,
            "list",
            "--json",
            "--status",
            "failed",
            "--error-contains",
            "AI gateway unavailable",
        ).stdout
    )
    assert job_id in [job["id"] for job in failed["jobs"]]

    dry = jobsctl(target, "retry-failed", "--target-id", "scrap-fail-1", "--dry-run")
    assert dry.returncode == 0 and job_id in dry.stdout and "would move" in dry.stdout
    assert (
        json.loads(jobsctl(target, "get", job_id, "--json").stdout)["status"] == "JOB_STATUS_FAILED"
    )

    moved = jobsctl(
        target,
        "--json",
        "retry-failed",
        "--target-id",
        "scrap-fail-1",
        "--error-contains",
        "unavailable",
    )
    assert moved.returncode == 0, moved.stderr
    assert json.loads(moved.stdout)["jobIds"] == [job_id]
    again = json.loads(jobsctl(target, "watch", job_id, "--json").stdout.splitlines()[-1])
    assert again["status"] == "JOB_STATUS_FAILED"
    assert len(again["attempts"]) == 2  # the history is kept across RetryFailed


def test_retry_over_100_needs_yes(failing_stack: Stack) -> None:
    target = failing_stack.address
    with JobsClient(target) as client:
        ids = [
            client.enqueue(f"bulk-{i}", CardAnalysisInput(text=f"{TEXT} {i}")).job.id
            for i in range(105)
        ]
        deadline = time.monotonic() + 60
        while any(client.get_job(i).status != JobStatus.JOB_STATUS_FAILED for i in ids[-5:]):
            assert time.monotonic() < deadline, "bulk jobs did not fail in time"
            time.sleep(0.2)
        for job_id in ids:
            client.wait(job_id, timeout=30)

    refused = jobsctl(target, "retry-failed", "--since", "10m", "--type", "card-analysis")
    assert refused.returncode == 2
    assert "--yes" in one_line_error(refused)
    with JobsClient(target) as client:
        assert client.get_job(ids[0]).status == JobStatus.JOB_STATUS_FAILED  # nothing moved

    moved = jobsctl(
        target,
        "retry-failed",
        "--since",
        "10m",
        "--type",
        "card-analysis",
        "--yes",
        "--batch-size",
        "40",
    )
    assert moved.returncode == 0, moved.stderr
    match = re.search(r"moved (\d+) of (\d+) matched", moved.stdout)
    assert match, moved.stdout
    assert int(match.group(1)) >= 105
