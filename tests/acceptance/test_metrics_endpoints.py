"""Both services' /metrics (issue 14, point 1), with real processes: an ai-gateway whose
fault injection breaks some answers and a job-service with --max-attempts 1 run three
jobs one after the other; both pages, scraped over HTTP and parsed as Prometheus text,
count exactly what happened. Also: the flag in both --help outputs, and a metrics port
in use refused in one line."""

from __future__ import annotations

import re
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from san_jobs.client import CardAnalysisInput, InvalidRequestError, JobsClient, JobStatus
from tests.support.processes import (
    BIN,
    RunningService,
    start_gateway,
    start_job_service,
    stop_all,
)

pytestmark = pytest.mark.acceptance

# Seeded draws (three per call, san_jobs/ai_gateway/faults.py): with this seed and rate the
# first call of the three gets a broken answer (INTERNAL), the next two do not.
FAULTS = ("--fault-malformed-rate", "0.5", "--fault-seed", "2")
TEXT = (
    "Durable queues keep work safe across crashes. A worker claims a job with a lease. "
    "If the worker dies, the lease expires and another worker takes the job."
)
MODEL = "local-textrank-v1"
ENQUEUE = "san.jobs.v1.JobService/Enqueue"
Labels = tuple[tuple[str, str], ...]


class Page:
    """A scraped /metrics page: samples by name and labels, help text by family."""

    def __init__(self, text: str) -> None:
        self.samples: dict[str, dict[Labels, float]] = defaultdict(dict)
        self.help: dict[str, str] = {}
        for family in text_string_to_metric_families(text):
            self.help[family.name] = family.documentation
            for sample in family.samples:
                self.samples[sample.name][tuple(sorted(sample.labels.items()))] = sample.value

    def value(self, name: str, **labels: str) -> float:
        return self.samples[name].get(tuple(sorted(labels.items())), 0.0)


def metrics_url(service: RunningService) -> str:
    match = re.search(r"metrics at (http://\S+)", service.log())
    assert match, service.log()
    return match.group(1)


def scrape(service: RunningService) -> Page:
    answer = httpx.get(metrics_url(service), timeout=10)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    return Page(answer.text)


@pytest.mark.parametrize(
    "database", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_both_pages_count_what_happened(
    tmp_path: Path, database: str, request: pytest.FixtureRequest
) -> None:
    url = None if database == "sqlite" else str(request.getfixturevalue("postgres_database"))
    gateway = start_gateway(tmp_path, "--metrics-listen", "127.0.0.1:0", *FAULTS)
    services = [gateway]
    try:
        jobs = start_job_service(
            tmp_path,
            "--metrics-listen",
            "127.0.0.1:0",
            "--max-attempts",
            "1",
            gateway=gateway.address,
            database_url=url,
        )
        services.insert(0, jobs)
        statuses = []
        with JobsClient(jobs.address) as client:
            for index in range(3):  # one at a time: the seeded draws go in this order
                job = client.enqueue(f"scrap-{index}", CardAnalysisInput(text=TEXT)).job
                statuses.append(client.wait(job.id, timeout=30).status)
            with pytest.raises(InvalidRequestError):
                client.enqueue("", CardAnalysisInput(text=TEXT))
        completed = statuses.count(JobStatus.JOB_STATUS_COMPLETED)
        failed = statuses.count(JobStatus.JOB_STATUS_FAILED)
        assert (completed, failed) == (2, 1), statuses

        page = scrape(jobs)
        card = {"job_type": "CARD_ANALYSIS"}
        outcomes = "san_jobs_job_outcomes_total"
        assert page.value(outcomes, **card, outcome="completed", error_code="") == completed
        assert page.value(outcomes, **card, outcome="failed", error_code="INTERNAL") == failed
        assert sum(page.samples[outcomes].values()) == 3
        assert page.value("san_jobs_job_wait_seconds_count", **card) == 3
        assert page.value("san_jobs_job_run_seconds_count", **card) == 3
        assert page.value("san_jobs_leases_lost_total") == 0
        handled = "san_jobs_grpc_server_handled_total"
        assert page.value(handled, method=ENQUEUE, code="OK") == 3
        assert page.value(handled, method=ENQUEUE, code="INVALID_ARGUMENT") == 1
        assert page.value("san_jobs_grpc_server_handling_seconds_count", method=ENQUEUE) == 4
        # State from the database, all instances.
        assert page.value("san_jobs_stats_up") == 1
        assert page.value("san_jobs_jobs", **card, status="COMPLETED") == completed
        assert page.value("san_jobs_jobs", **card, status="FAILED") == failed
        assert page.value("san_jobs_queue_depth", **card) == 0
        assert page.value("san_jobs_oldest_due_job_age_seconds", **card) == 0
        assert set(page.samples["san_jobs_dispatch_paused"].values()) == {0.0}
        assert page.value("san_jobs_update_streams_open") == 0  # wait()'s streams ended
        assert page.value("san_jobs_change_streams_open") == 0
        # Three jobs ended: three changes; with no stream following, the feed task reads
        # its position once per poll (a second).
        deadline = time.monotonic() + 10
        while scrape(jobs).value("san_jobs_change_feed_position") != 3:
            assert time.monotonic() < deadline, "the change feed's position stayed behind"
            time.sleep(0.2)
        assert all(page.help.values()), page.help
        assert {"san_jobs_jobs", "san_jobs_job_outcomes", "san_jobs_grpc_server_handled"} <= set(
            page.help
        )

        page = scrape(gateway)
        calls = "san_aigateway_calls_total"
        analyze = {"method": "AnalyzeContent"}
        assert page.value(calls, **analyze, model=MODEL, code="OK") == completed
        assert page.value(calls, **analyze, model="", code="INTERNAL") == failed
        assert sum(page.samples[calls].values()) == 3
        assert page.value("san_aigateway_call_duration_seconds_count", **analyze) == 3
        assert page.value("san_aigateway_tokens_total", model=MODEL, direction="input") > 0
        assert page.value("san_aigateway_tokens_total", model=MODEL, direction="output") > 0
        assert page.value("san_aigateway_calls_in_flight", **analyze) == 0
        assert page.value("san_aigateway_rate_limited_total", **analyze) == 0
        assert page.value("san_aigateway_cached_answers_total", **analyze) == 0
        # The calls came inside JobService's StreamCalls stream, open while it runs.
        stream = {"method": "san.aigateway.v1.AiGatewayService/StreamCalls"}
        assert page.value("san_aigateway_grpc_server_in_flight", **stream) >= 1
        assert all(page.help.values()), page.help

        # A metrics port in use: each service refuses to start, in one line.
        taken = metrics_url(gateway).removeprefix("http://").removesuffix("/metrics")
        refused = subprocess.run(
            [str(BIN / "job-service"), "--listen", "127.0.0.1:0", "--metrics-listen", taken,
             "--database-url", f"sqlite+aiosqlite:///{tmp_path / 'other.db'}"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert refused.returncode == 1, refused.stderr
        assert refused.stderr.strip().splitlines()[-1] == (
            f"job-service: cannot serve metrics on {taken}: Address already in use"
        ), refused.stderr
        assert "Traceback" not in refused.stderr
        taken = metrics_url(jobs).removeprefix("http://").removesuffix("/metrics")
        refused = subprocess.run(
            [str(BIN / "ai-gateway"), "--listen", "127.0.0.1:0", "--metrics-listen", taken],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert refused.returncode == 1, refused.stderr
        assert refused.stderr.strip().splitlines()[-1] == (
            f"ai-gateway: error: cannot serve metrics on {taken}: Address already in use"
        ), refused.stderr
    finally:
        stop_all(*services)


@pytest.mark.parametrize("program", ["job-service", "ai-gateway"])
def test_the_flag_is_in_help(program: str) -> None:
    shown = subprocess.run(
        [str(BIN / program), "--help"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert "--metrics-listen HOST:PORT" in shown
    assert "/metrics" in shown
