"""A waiting TIL and its recall outlive a kill -9 of job-service (issue 26's "JobService
restarted between the cards and the TIL changes nothing"), with real ai-gateway (the
built-in backend) and job-service processes, on SQLite and PostgreSQL: five cards
due in a few seconds, a TIL depending on them with no notes of its own, a recall
depending on the TIL; job-service is killed -9 before any card runs and started again;
the TIL's notes are the five cards' summaries in the order they completed, and the
recall's one source is the TIL (about 10 s each: two job-service starts and the cards'
delay, which must outlast the kill)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from tests.support.jobs_api import SAMPLE_TEXT, channel, wait_terminal
from tests.support.processes import running, start_gateway, start_job_service

pytestmark = pytest.mark.acceptance

DAY = "2026-12-04"
CARD_DELAY = 4.0  # seconds: the cards are due only after the kill and the restart began


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'jobs.db'}"
    return str(request.getfixturevalue("postgres_database"))


async def _enqueue_day(stub: pb_grpc.JobServiceStub) -> tuple[list[str], str, str]:
    due = Timestamp()
    due.FromDatetime(datetime.now(UTC) + timedelta(seconds=CARD_DELAY))
    cards = []
    for index in range(5):
        request = pb.EnqueueRequest(
            job_type=pb.JOB_TYPE_CARD_ANALYSIS,
            target_id=f"scrap-{index}",
            card_analysis_input=pb.CardAnalysisInput(
                title=f"Scrap {index}", text=f"Topic {index} matters. {SAMPLE_TEXT}"
            ),
            schedule_time=due,
            request_id=f"card-{index}",
        )
        cards.append((await stub.Enqueue(request)).job.id)
    til = await stub.Enqueue(
        pb.EnqueueRequest(
            job_type=pb.JOB_TYPE_TIL_GENERATION,
            target_id=f"til:{DAY}",
            til_generation_input=pb.TilGenerationInput(day=DAY),
            depends_on=cards,
            request_id=f"til:me:{DAY}",
        )
    )
    recall = await stub.Enqueue(
        pb.EnqueueRequest(
            job_type=pb.JOB_TYPE_RECALL_GENERATION,
            target_id=f"recall:{DAY}",
            recall_generation_input=pb.RecallGenerationInput(question_count=3),
            depends_on=[til.job.id],
            request_id=f"recall:me:{DAY}",
        )
    )
    assert til.job.waiting_for.reason == pb.PAUSE_REASON_DEPENDENCIES
    assert recall.job.waiting_for.reason == pb.PAUSE_REASON_DEPENDENCIES
    return cards, til.job.id, recall.job.id


async def test_a_waiting_til_and_its_recall_outlive_a_kill_9(
    tmp_path: Path, database_url: str
) -> None:
    with running(start_gateway(tmp_path)) as gateway:
        first = start_job_service(tmp_path, gateway=gateway.address, database_url=database_url)
        try:
            async with channel(first.address) as chan:
                cards, til_id, recall_id = await _enqueue_day(pb_grpc.JobServiceStub(chan))
        finally:
            first.kill()
        with running(
            start_job_service(tmp_path, gateway=gateway.address, database_url=database_url)
        ) as second:
            async with channel(second.address) as chan:
                stub = pb_grpc.JobServiceStub(chan)
                waiting = (await stub.GetJob(pb.GetJobRequest(job_id=til_id))).job
                # Still waiting (for the cards not COMPLETED yet, in depends_on order),
                # unless a slow start let every card run already.
                if waiting.status == pb.JOB_STATUS_PENDING and waiting.HasField("waiting_for"):
                    left = list(waiting.waiting_for.job_ids)
                    assert left and left == [c for c in cards if c in left]
                final = await wait_terminal(stub, [*cards, til_id, recall_id], timeout=60)
                assert {pb.JobStatus.Name(j.status) for j in final.values()} == {
                    "JOB_STATUS_COMPLETED"
                }, {j.id: j.error_message for j in final.values()}
                jobs = {
                    job_id: (await stub.GetJob(pb.GetJobRequest(job_id=job_id))).job
                    for job_id in [*cards, til_id, recall_id]
                }
                by_completion = sorted(
                    cards, key=lambda i: (jobs[i].complete_time.ToNanoseconds(), i)
                )
                til = jobs[til_id]
                assert list(til.til_generation_input.notes) == [
                    jobs[i].card_analysis_result.summary for i in by_completion
                ]
                assert til.attempts[0].start_time.ToNanoseconds() >= max(
                    jobs[i].complete_time.ToNanoseconds() for i in cards
                )
                sources = jobs[recall_id].recall_generation_input.sources
                assert [(s.job_id, s.text) for s in sources] == [
                    (til_id, til.til_generation_result.body)
                ]
                assert jobs[recall_id].recall_generation_result.questions
