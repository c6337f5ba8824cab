"""Issue 42, point 1, with real processes (ai-gateway's built-in backend, job-service
on SQLite and on PostgreSQL): a chain of 1,100 jobs stored before the depth bound
(written straight into the database, as an older version let callers make it) hangs
on a root card the gateway refuses (over its --max-input-tokens). Its FAILED could not
be written through the dependents' trigger (SQLite: "too many levels of trigger
recursion"; PostgreSQL: "stack depth limit exceeded" between 600 and 800 levels), and
the root was given back and claimed again every few seconds without end; now it ends
FAILED on its one attempt, and every job of the chain is CANCELLED. About 10 s per
database: two process starts, the root's 3 s delay, the refused writes."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import create_async_engine

from san_jobs.job_service.storage.tables import async_jobs, job_dependencies
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from tests.support.jobs_api import card_request, channel, wait_terminal
from tests.support.processes import running, start_gateway, start_job_service

pytestmark = pytest.mark.acceptance

CHAIN = 1_100


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'jobs.db'}"
    return str(request.getfixturevalue("postgres_database"))


async def stored_chain(database_url: str, first: str) -> list[str]:
    """CHAIN - 1 more jobs after `first`, each depending on the one before: copies of
    its row, in one transaction of the test's own (no JobService in between)."""
    engine = create_async_engine(database_url)
    try:
        async with engine.begin() as conn:
            found = await conn.execute(select(async_jobs).where(async_jobs.c.id == first))
            row = dict(found.mappings().one())
            await conn.execute(
                update(async_jobs).where(async_jobs.c.id == first).values(has_dependents=True)
            )
            ids, links, previous = [], [], first
            for _ in range(CHAIN - 1):
                job_id = str(uuid.uuid4())
                ids.append(job_id)
                links.append({"job_id": job_id, "depends_on_id": previous, "position": 0})
                previous = job_id
            rows = [
                row
                | {
                    "id": job_id,
                    "target_id": f"stored{index}",
                    "depends_on": [link["depends_on_id"]],
                    "has_dependents": index < CHAIN - 2,
                }
                for index, (job_id, link) in enumerate(zip(ids, links, strict=True))
            ]
            await conn.execute(insert(async_jobs), rows)
            await conn.execute(insert(job_dependencies), links)
    finally:
        await engine.dispose()
    return ids


async def test_a_root_whose_end_the_trigger_cannot_write_still_fails_once(
    tmp_path: Path, database_url: str
) -> None:
    gateway = start_gateway(tmp_path / "gateway", "--max-input-tokens", "50")
    with running(gateway):
        service = start_job_service(
            tmp_path / "job-service",
            "--max-attempts",
            "1",
            gateway=gateway.address,
            database_url=database_url,
        )
        with running(service):
            async with channel(service.address) as chan:
                stub = pb_grpc.JobServiceStub(chan)
                due = Timestamp()
                due.FromDatetime(datetime.now(UTC) + timedelta(seconds=3))
                too_long = "Refused by the gateway for its length. " * 40
                root = (await stub.Enqueue(card_request("root", too_long, schedule_time=due))).job
                first = (
                    await stub.Enqueue(card_request("first", "Link. Text.", depends_on=[root.id]))
                ).job.id
                chain = [first, *await stored_chain(database_url, first)]
                ended = (await wait_terminal(stub, [root.id], timeout=60))[root.id]
                assert ended.status == pb.JOB_STATUS_FAILED, service.log_tail()
                assert ended.error_code == "INTERNAL"
                assert len(ended.attempts) == 1
                last = (await stub.GetJob(pb.GetJobRequest(job_id=chain[-1]))).job
                assert last.status == pb.JOB_STATUS_CANCELLED
                assert last.error_message == f"Dependency {chain[-2]} CANCELLED"
                stats = await stub.GetJobStats(pb.GetJobStatsRequest())
                active = (pb.JOB_STATUS_PENDING, pb.JOB_STATUS_PROCESSING)
                assert not [c for c in stats.counts if c.status in active], stats.counts
