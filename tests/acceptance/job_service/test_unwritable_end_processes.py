"""Issue 42, point 1, with real processes (ai-gateway's built-in backend, job-service
on SQLite): a chain of 1,100 jobs stored before the depth bound (written straight into
the database file, as an older version let callers make it) hangs on a root card the
gateway refuses (over its --max-input-tokens). Its FAILED could not be written through
the dependents' trigger ("too many levels of trigger recursion"), and the root was
given back and claimed again every few seconds without end; now it ends FAILED on its
one attempt, and every job of the chain is CANCELLED. About 10 s: two process starts,
the root's 3 s delay, the refused writes."""

from __future__ import annotations

import sqlite3
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from tests.support.jobs_api import card_request, channel, wait_terminal
from tests.support.processes import running, start_gateway, start_job_service

pytestmark = pytest.mark.acceptance

CHAIN = 1_100


def stored_chain(database: Path, first: str) -> list[str]:
    """CHAIN - 1 more jobs after `first`, each depending on the one before: copies of
    its row, in one transaction of the file's own."""
    with sqlite3.connect(database, timeout=30) as db:
        db.row_factory = sqlite3.Row
        row = dict(db.execute("SELECT * FROM async_jobs WHERE id = ?", (first,)).fetchone())
        ids, previous = [], first
        db.execute("UPDATE async_jobs SET has_dependents = 1 WHERE id = ?", (first,))
        for index in range(CHAIN - 1):
            job_id = str(uuid.uuid4())
            values = row | {
                "id": job_id,
                "target_id": f"stored{index}",
                "depends_on": f'["{previous}"]',
                "has_dependents": int(index < CHAIN - 2),
            }
            names = ", ".join(values)
            marks = ", ".join("?" for _ in values)
            db.execute(f"INSERT INTO async_jobs ({names}) VALUES ({marks})", list(values.values()))
            db.execute(
                "INSERT INTO job_dependencies (job_id, depends_on_id, position) VALUES (?, ?, 0)",
                (job_id, previous),
            )
            ids.append(job_id)
            previous = job_id
    return ids


async def test_a_root_whose_end_the_trigger_cannot_write_still_fails_once(
    tmp_path: Path,
) -> None:
    database = tmp_path / "jobs.db"
    gateway = start_gateway(tmp_path / "gateway", "--max-input-tokens", "50")
    with running(gateway):
        service = start_job_service(
            tmp_path / "job-service",
            "--max-attempts",
            "1",
            gateway=gateway.address,
            database_url=f"sqlite+aiosqlite:///{database}",
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
                chain = [first, *stored_chain(database, first)]
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
