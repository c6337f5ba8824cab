"""Issue 14, point 8: job-service's health reports the JobService name NOT_SERVING
while its database is unreachable and SERVING again by itself once it is back; the
server's own name ("", liveness) stays SERVING throughout.

A real job-service process on PostgreSQL through a TCP proxy the test cuts and
restores, twice: once refusing (connections reset, as when the server is gone), once
hanging (nothing passes, nothing closes, as in a network partition: only the check's
timeout notices). Jobs enqueued before the cuts still complete.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy import make_url

from san_jobs.job_service.server import SERVICE_NAME
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from tests.support.jobs_api import channel, enqueue_cards
from tests.support.processes import running, start_gateway, start_job_service
from tests.support.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.acceptance, pytest.mark.postgres]

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
# Generous bounds for a loaded test machine; with --health-interval 0.3 the flips
# take well under a second.
FLIP_WITHIN = 15.0


async def _status(health: health_pb2_grpc.HealthStub, service: str) -> int:
    answer = await health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
    return int(answer.status)


async def _wait_status(health: health_pb2_grpc.HealthStub, wanted: int, what: str) -> None:
    deadline = time.monotonic() + FLIP_WITHIN
    while (status := await _status(health, SERVICE_NAME)) != wanted:
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: still {status} after {FLIP_WITHIN} s")
        await asyncio.sleep(0.05)


async def _wait_completed(stub: pb_grpc.JobServiceStub, job_ids: list[str]) -> None:
    deadline = time.monotonic() + 60
    while True:
        statuses = [
            (await stub.GetJob(pb.GetJobRequest(job_id=job_id), timeout=10)).job.status
            for job_id in job_ids
        ]
        if all(status == pb.JOB_STATUS_COMPLETED for status in statuses):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"jobs not all COMPLETED: {statuses}")
        await asyncio.sleep(0.2)


@pytest.mark.timeout(120)
async def test_readiness_follows_the_database_and_liveness_does_not(
    postgres_database: str, tmp_path: Path
) -> None:
    url = make_url(postgres_database)
    with TcpProxy(url.host or "127.0.0.1", url.port or 5432) as proxy:
        proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(False)
        with (
            # Each call takes a while, so jobs are still running when the cut comes.
            running(
                start_gateway(tmp_path, "--backend", "instant", "--fault-latency", "0.5")
            ) as gateway,
            running(
                start_job_service(
                    tmp_path,
                    "--health-interval",
                    "0.3",
                    "--lease",
                    "3",
                    gateway=gateway.address,
                    database_url=proxied,
                )
            ) as service,
        ):
            async with channel(service.address) as chan:
                health = health_pb2_grpc.HealthStub(chan)
                stub = pb_grpc.JobServiceStub(chan)
                assert await _status(health, SERVICE_NAME) == SERVING
                job_ids = await enqueue_cards(stub, 20, "before-cut")

                for hang in (False, True):
                    proxy.cut(hang=hang)
                    await _wait_status(health, NOT_SERVING, f"cut (hang={hang})")
                    # Liveness: the process is fine; restarting it would not help.
                    assert await _status(health, "") == SERVING
                    proxy.restore()
                    await _wait_status(health, SERVING, f"restored (hang={hang})")
                    assert await _status(health, "") == SERVING

                await _wait_completed(stub, job_ids)
                job_ids = await enqueue_cards(stub, 5, "after-restore")
                await _wait_completed(stub, job_ids)

    log = service.log()
    # One line when it goes away, one when it is back: not one per check.
    assert log.count("database unreachable") == 2, log
    assert log.count("database answers again") == 2, log
