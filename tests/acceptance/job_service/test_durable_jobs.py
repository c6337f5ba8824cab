"""Issue 3's acceptance tests: real ai-gateway and job-service processes.

(a) 200 jobs all COMPLETED; (b) kill -9 mid-run, restart: none lost, none stuck;
(c) three instances on one PostgreSQL: no gateway call twice, streams see other
instances' work; (d) the gateway down mid-run, then back: one RetryFailed heals all.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sqlite3
import time
from collections import Counter
from pathlib import Path

import pytest

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from tests.support.jobs_api import channel, enqueue_cards, free_port, list_all, wait_terminal
from tests.support.processes import (
    RunningService,
    running,
    start_gateway,
    start_job_service,
    start_service,
)

pytestmark = pytest.mark.acceptance


def _calls_per_job(call_log: Path) -> Counter[str]:
    counts: Counter[str] = Counter()
    for line in call_log.read_text().splitlines():
        record = json.loads(line)
        if record.get("job_id"):
            counts[record["job_id"]] += 1
    return counts


async def test_200_jobs_all_complete(tmp_path: Path) -> None:
    with (
        running(start_gateway(tmp_path)) as gateway,
        running(start_job_service(tmp_path, gateway=gateway.address)) as jobs,
    ):
        async with channel(jobs.address) as chan:
            stub = pb_grpc.JobServiceStub(chan)
            ids = await enqueue_cards(stub, 200, "scrap")
            final = await wait_terminal(stub, ids, timeout=90)
            assert len(final) == 200
            assert Counter(pb.JobStatus.Name(j.status) for j in final.values()) == {
                "JOB_STATUS_COMPLETED": 200
            }
            listed = await list_all(stub)
            assert {j.id for j in listed} == set(ids)
            for job in listed:
                assert job.status == pb.JOB_STATUS_COMPLETED
                assert job.card_analysis_result.summary
                assert job.card_analysis_result.tags
                assert job.attempt_count == 1
        assert jobs.stop() == 0
    # Every log line about a job names it (200 enqueued and 200 completed lines at least).
    about_jobs = [
        line
        for line in jobs.log().splitlines()
        if re.search(r" (enqueued|claimed|completed|failed|retrying|cancelled|given back)\b", line)
    ]
    assert len(about_jobs) >= 400
    assert "event loop uvloop" in jobs.log()
    for line in about_jobs:
        assert re.search(r"job_id=[0-9a-f-]{36}", line), line


@pytest.mark.timeout(240)
async def test_kill_9_mid_run_then_restart_loses_nothing(tmp_path: Path) -> None:
    database_url = f"sqlite+aiosqlite:///{tmp_path / 'jobs.db'}"
    call_log = tmp_path / "calls.jsonl"
    with running(
        start_gateway(tmp_path, "--fault-latency", "0.3", "--call-log", str(call_log))
    ) as gateway:
        first = start_job_service(
            tmp_path,
            "--lease",
            "2",
            "--workers",
            "8",
            gateway=gateway.address,
            database_url=database_url,
        )
        async with channel(first.address) as chan:
            stub = pb_grpc.JobServiceStub(chan)
            ids = await enqueue_cards(stub, 60, "crash")
            # Let it get going: some done, some in flight.
            for _ in range(200):
                done = [j for j in await list_all(stub, statuses=[pb.JOB_STATUS_COMPLETED])]
                if len(done) >= 8:
                    break
                await asyncio.sleep(0.05)
        first.kill()
        # Read from the file once it is dead: a job listed PROCESSING before the kill
        # may still have completed before it (seen once on a loaded machine).
        with contextlib.closing(sqlite3.connect(tmp_path / "jobs.db")) as db:
            rows = db.execute("SELECT id FROM async_jobs WHERE status = 'PROCESSING'")
            in_flight = {job_id for (job_id,) in rows}
        assert in_flight, "the kill should land while jobs are PROCESSING"
        with running(
            start_job_service(
                tmp_path, "--lease", "2", gateway=gateway.address, database_url=database_url
            )
        ) as second:
            async with channel(second.address) as chan:
                stub = pb_grpc.JobServiceStub(chan)
                final = await wait_terminal(stub, ids, timeout=150)
                jobs = await list_all(stub)
    assert len(jobs) == 60, "no job may disappear"
    assert {j.status for j in final.values()} == {pb.JOB_STATUS_COMPLETED}
    assert not [j for j in jobs if j.status == pb.JOB_STATUS_PROCESSING]
    by_id = {j.id: j for j in jobs}
    for job_id in in_flight:
        job = by_id[job_id]
        # The lost attempt is counted and recorded as such.
        assert job.attempt_count >= 2
        assert job.attempts[0].error_code == "LEASE_EXPIRED"
    calls = _calls_per_job(call_log)
    assert set(calls) == set(ids)


@pytest.mark.postgres
@pytest.mark.timeout(300)
async def test_three_instances_on_postgres_never_call_twice(
    tmp_path: Path, postgres_database: str
) -> None:
    call_log = tmp_path / "calls.jsonl"
    with running(start_gateway(tmp_path, "--call-log", str(call_log))) as gateway:
        instances: list[RunningService] = []
        try:
            for name in ("a", "b", "c"):
                instances.append(
                    start_job_service(
                        tmp_path,
                        "--instance-id",
                        name,
                        gateway=gateway.address,
                        database_url=postgres_database,
                    )
                )
            async with (
                channel(instances[0].address) as chan_a,
                channel(instances[1].address) as chan_b,
                channel(instances[2].address) as chan_c,
            ):
                stubs = [pb_grpc.JobServiceStub(c) for c in (chan_a, chan_b, chan_c)]
                # Enqueue through all three; watch everything from instance a only.
                batches = await asyncio.gather(
                    *(
                        enqueue_cards(stub, 334 if i < 2 else 332, f"pg-{i}")
                        for i, stub in enumerate(stubs)
                    )
                )
                ids = [job_id for batch in batches for job_id in batch]
                assert len(ids) == 1000
                final = await wait_terminal(stubs[0], ids, timeout=240)
            for service in instances:
                assert service.stop() == 0
        finally:
            for service in instances:
                service.kill()
    assert len(final) == 1000
    assert {j.status for j in final.values()} == {pb.JOB_STATUS_COMPLETED}
    calls = _calls_per_job(call_log)
    assert set(calls) == set(ids)
    twice = {job_id: n for job_id, n in calls.items() if n != 1}
    assert not twice, f"gateway called more than once for {len(twice)} jobs"
    completed_by = {
        service.name + str(i): len(re.findall(r"job_id=\S+ completed: ", service.log()))
        for i, service in enumerate(instances)
    }
    assert sum(completed_by.values()) == 1000
    # Instance a's stream saw COMPLETED for jobs that b and c finished.
    assert sum(1 for n in completed_by.values() if n > 0) >= 2, completed_by


@pytest.mark.timeout(240)
async def test_gateway_outage_then_one_retry_failed_heals_all(tmp_path: Path) -> None:
    database = tmp_path / "jobs.db"
    port = free_port()
    # A fixed port, so the gateway can come back where job-service expects it.
    gateway = start_service_on(tmp_path, port)
    with (
        running(gateway),
        running(
            start_job_service(
                tmp_path,
                "--max-attempts",
                "2",
                "--retry-base-delay",
                "0.2",
                "--retry-max-delay",
                "0.5",
                "--deadline",
                "5",  # well above the 1 s model latency, even on a loaded machine
                "--workers",
                "40",
                # The operator's path without the breaker: jobs fail during the outage
                # and one RetryFailed heals them (test_breaker_outage.py: with it).
                "--breaker-failures",
                "1000000",
                "--breaker-unreachable-after",
                "0",
                gateway=f"127.0.0.1:{port}",
                database_url=f"sqlite+aiosqlite:///{database}",
            )
        ) as jobs,
    ):
        async with channel(jobs.address) as chan:
            stub = pb_grpc.JobServiceStub(chan)
            ids = await enqueue_cards(stub, 80, "outage")
            await asyncio.sleep(0.6)
            gateway.kill()  # the provider goes down mid-run
            final = await wait_terminal(stub, ids, timeout=120)
            failed = [j for j in final.values() if j.status == pb.JOB_STATUS_FAILED]
            assert failed, "with the gateway gone, jobs must fail"
            for job in failed:
                assert job.error_message.startswith(("AI gateway unavailable:", "Timeout:")), (
                    job.error_message
                )
                assert job.attempt_count == 2
                assert job.error_code in {"UNAVAILABLE", "DEADLINE_EXCEEDED"}
            # The operator's SQL from the contract, as written.
            with sqlite3.connect(database) as db:
                rows = db.execute(
                    "SELECT target_id FROM async_jobs WHERE status = 'FAILED' "
                    "AND error_message LIKE '%AI gateway unavailable%'"
                ).fetchall()
            unavailable = {
                j.target_id for j in failed if "AI gateway unavailable" in j.error_message
            }
            assert {r[0] for r in rows} == unavailable and unavailable
            # The provider is back.
            with running(start_service_on(tmp_path, port)):
                retried = await stub.RetryFailed(
                    pb.RetryFailedRequest(
                        error_message_contains="AI gateway unavailable", requested_by="ops"
                    ),
                    timeout=30,
                )
                timeouts = [j.id for j in failed if j.error_message.startswith("Timeout:")]
                if timeouts:
                    more = await stub.RetryFailed(
                        pb.RetryFailedRequest(job_ids=timeouts), timeout=30
                    )
                    assert more.retried_count == len(timeouts)
                assert retried.retried_count == len(unavailable)
                healed = await wait_terminal(stub, ids, timeout=120)
            assert {j.status for j in healed.values()} == {pb.JOB_STATUS_COMPLETED}
            for job_id in (j.id for j in failed):
                job = (await stub.GetJob(pb.GetJobRequest(job_id=job_id), timeout=10)).job
                assert len(job.attempts) == 3, "history kept: two failed attempts and the good one"
                assert job.attempts[0].error_code in {"UNAVAILABLE", "DEADLINE_EXCEEDED"}


def start_service_on(tmp_path: Path, port: int) -> RunningService:
    return start_service(
        "ai-gateway",
        ["ai-gateway", "--listen", f"127.0.0.1:{port}", "--fault-latency", "1"],
        tmp_path,
    )


async def test_clean_stop_leaves_nothing_processing(tmp_path: Path) -> None:
    """SIGTERM with a short grace: finished jobs stay done, the rest go back to PENDING
    without an attempt charged; a restart completes them."""
    database_url = f"sqlite+aiosqlite:///{tmp_path / 'jobs.db'}"
    with running(start_gateway(tmp_path, "--fault-latency", "3")) as gateway:
        jobs = start_job_service(
            tmp_path,
            "--grace",
            "0.5",
            "--workers",
            "4",
            gateway=gateway.address,
            database_url=database_url,
        )
        async with channel(jobs.address) as chan:
            stub = pb_grpc.JobServiceStub(chan)
            ids = await enqueue_cards(stub, 6, "grace")
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                # 4 calls, and 2 jobs claimed ahead of them (given back at once).
                if len(await list_all(stub, statuses=[pb.JOB_STATUS_PROCESSING])) == 6:
                    break
                await asyncio.sleep(0.05)
        assert jobs.stop() == 0
        with sqlite3.connect(tmp_path / "jobs.db") as db:
            rows = db.execute("SELECT status, attempt_count FROM async_jobs").fetchall()
        assert Counter(status for status, _ in rows) == {"PENDING": 6}
        assert {attempts for _, attempts in rows} == {0}
        assert "given back as PENDING at shutdown" in jobs.log()
        with running(
            start_job_service(tmp_path, gateway=gateway.address, database_url=database_url)
        ) as again:
            async with channel(again.address) as chan:
                final = await wait_terminal(pb_grpc.JobServiceStub(chan), ids, timeout=60)
        assert {j.status for j in final.values()} == {pb.JOB_STATUS_COMPLETED}
        assert {j.attempt_count for j in final.values()} == {1}


async def test_unreachable_gateway_is_reported_per_job(tmp_path: Path) -> None:
    port = free_port()
    with running(
        # A call waits for a connection as long as its deadline (a gateway back within
        # it costs no attempt): keep the deadline short so the failure comes soon.
        start_job_service(
            tmp_path, "--max-attempts", "1", "--deadline", "3", gateway=f"127.0.0.1:{port}"
        )
    ) as jobs:
        async with channel(jobs.address) as chan:
            stub = pb_grpc.JobServiceStub(chan)
            [job_id] = await enqueue_cards(stub, 1, "nogw")
            final = await wait_terminal(stub, [job_id], timeout=30)
    job = final[job_id]
    assert job.status == pb.JOB_STATUS_FAILED
    assert job.error_message.startswith("AI gateway unavailable:")
    assert job.error_code == "UNAVAILABLE"
