"""SIGTERM on PostgreSQL while the worker waits out its pacing between two claims
(issue 12, "missing tests"): no claim after the signal, nothing left PROCESSING,
exit status 0.

How the signal is made to land in that wait, without sleeping: a real job-service
with 2 workers and --batch-interval 1 (at most one claim a second), and 6 jobs made
due by one INSERT. Its first claim takes 4 jobs, every free slot (2 calls and 2
claimed ahead of them, worker.py's claim_ahead); a claim that fills every slot is
followed by the pacing wait at once (more may be due), and the wait lasts a second.
The instant gateway answers at once, so the 4 jobs are COMPLETED within
milliseconds of that claim: the test sends SIGTERM when it sees them COMPLETED, with
the other 2 still due and slots free, and checks afterwards (from the stored claim
time) that the signal indeed came inside the wait.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from san_jobs.job_service.domain.model import Job, JobStatus, JobType, NewJob, OnDuplicate
from san_jobs.job_service.domain.ports import EnqueueParams
from san_jobs.job_service.storage import SqlJobStore
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from tests.support.jobs_api import SAMPLE_TEXT, channel
from tests.support.processes import RunningService, running, start_gateway, start_job_service

pytestmark = [pytest.mark.acceptance, pytest.mark.postgres]

WORKERS = 2
CLAIMED = 2 * WORKERS  # what one claim takes: a call slot each, as many ahead
PACING = timedelta(seconds=1)  # --batch-interval, its largest allowed value


async def enqueue_in_one_statement(database_url: str, count: int) -> list[str]:
    """`count` card jobs, inserted by one statement (concurrent enqueues share one
    INSERT), so they become due together; PostgreSQL NOTIFY wakes the service."""
    store = SqlJobStore(database_url, instance_id="test-enqueuer")
    try:
        made = await asyncio.gather(
            *(
                store.commands.enqueue(
                    EnqueueParams(
                        job=NewJob(
                            job_type=JobType.CARD_ANALYSIS,
                            target_id=f"pacing-{i}",
                            request_params={"text": SAMPLE_TEXT},
                            requested_by="tester",
                            request_id=None,
                            max_attempts=3,
                        ),
                        on_duplicate=OnDuplicate.REJECT,
                    )
                )
                for i in range(count)
            )
        )
    finally:
        await store.close()
    return [job.id for job, _ in made]


async def until_completed(service: RunningService, job_ids: list[str], count: int) -> None:
    """Return as soon as the service's update stream shows `count` of the jobs COMPLETED."""
    async with channel(service.address) as chan:
        updates = pb_grpc.JobServiceStub(chan).StreamJobUpdates(
            pb.StreamJobUpdatesRequest(job_ids=job_ids), timeout=20
        )
        completed: set[str] = set()
        async for update in updates:
            if update.job.status == pb.JOB_STATUS_COMPLETED:
                completed.add(update.job.id)
            if len(completed) == count:
                updates.cancel()
                return
    raise AssertionError(f"the stream ended with {len(completed)} of {count} COMPLETED")


async def stored_jobs(database_url: str, job_ids: list[str]) -> list[Job]:
    store = SqlJobStore(database_url, instance_id="test-reader")
    try:
        return await store.queries.get_many(job_ids)
    finally:
        await store.close()


async def test_sigterm_during_the_pacing_wait_claims_nothing_more(
    tmp_path: Path, postgres_database: str
) -> None:
    with running(start_gateway(tmp_path, "--backend", "instant")) as gateway:
        service = start_job_service(
            tmp_path,
            "--workers",
            str(WORKERS),
            "--batch-interval",
            str(PACING.total_seconds()),
            gateway=gateway.address,
            database_url=postgres_database,
        )
        with running(service):
            job_ids = await enqueue_in_one_statement(postgres_database, CLAIMED + WORKERS)
            await until_completed(service, job_ids, CLAIMED)
            signalled_at = datetime.now(UTC)
            service.proc.send_signal(signal.SIGTERM)
            exit_status = await asyncio.to_thread(service.stop)
    assert exit_status == 0, service.log()
    jobs = await stored_jobs(postgres_database, job_ids)
    # The premise: one claim took both slots, and the signal came inside the wait after it.
    first_claim = min(attempt.start_time for job in jobs for attempt in job.attempts)
    in_first_claim = [
        job for job in jobs if job.attempts[:1] and job.attempts[0].start_time == first_claim
    ]
    assert len(in_first_claim) == CLAIMED, "the first claim should have filled every slot"
    assert signalled_at - first_claim < PACING - timedelta(seconds=0.2), (
        f"SIGTERM came {signalled_at - first_claim} after the claim: too late to test the wait"
    )
    # What must hold: no claim after the signal, nothing PROCESSING.
    late = [
        job.id for job in jobs for attempt in job.attempts if attempt.start_time >= signalled_at
    ]
    assert not late, f"claimed after SIGTERM: {late}"
    assert Counter(job.status for job in jobs) == {
        JobStatus.COMPLETED: CLAIMED,
        JobStatus.PENDING: WORKERS,
    }
    for job in jobs:
        if job.status is JobStatus.PENDING:
            assert (job.attempt_count, job.attempts, job.started_at) == (0, (), None)
    assert "shutting down: no new claims" in service.log()
