"""Enqueue, GetJob, ListJobs and CancelJob over real gRPC, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from tests.integration.job_service.conftest import Service, StartService
from tests.integration.job_service.scripted_gateway import Fail, Hang, Held
from tests.support.jobs_api import card_request, list_all, wait_terminal
from tests.support.rich_errors import rich_error
from tests.support.waiting import wait_until


async def call_error(awaitable: object) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await awaitable  # type: ignore[misc]
    return caught.value


async def test_enqueue_returns_committed_pending_job_that_completes(service: Service) -> None:
    response = await service.stub.Enqueue(
        card_request("scrap-1", "Queues keep work safe. Workers take jobs.", requested_by="user-7")
    )
    job = response.job
    assert job.status == pb.JOB_STATUS_PENDING
    assert uuid.UUID(job.id)
    assert not response.deduplicated
    assert job.requested_by == "user-7"
    assert job.max_attempts == 3
    # The answer carries no input (it may be megabytes); GetJob has it.
    assert job.WhichOneof("input") is None
    # Committed before the answer: readable at once.
    got = (await service.stub.GetJob(pb.GetJobRequest(job_id=job.id))).job
    assert got.id == job.id
    assert got.card_analysis_input.text.startswith("Queues")
    final = (await wait_terminal(service.stub, [job.id], timeout=20))[job.id]
    assert final.status == pb.JOB_STATUS_COMPLETED
    assert final.card_analysis_result.summary == "Queues keep work safe."
    assert list(final.card_analysis_result.tags) == ["scripted"]
    assert final.card_analysis_result.embedding == pytest.approx([0.6, 0.8])
    assert final.HasField("complete_time") and final.HasField("start_time")
    assert [a.attempt for a in final.attempts] == [1]
    assert final.attempts[0].HasField("end_time")


async def test_every_job_type_runs(service: Service) -> None:
    til = await service.stub.Enqueue(
        pb.EnqueueRequest(
            job_type=pb.JOB_TYPE_TIL_GENERATION,
            target_id="2026-11-29",
            til_generation_input=pb.TilGenerationInput(
                day="2026-11-29", notes=["gRPC 스트림", "SKIP LOCKED"]
            ),
        )
    )
    recall = await service.stub.Enqueue(
        pb.EnqueueRequest(
            job_type=pb.JOB_TYPE_RECALL_GENERATION,
            target_id="deck-1",
            recall_generation_input=pb.RecallGenerationInput(
                sources=[
                    pb.RecallSource(title="Lease", text="A lease expires."),
                    pb.RecallSource(title="WAL", text="Write-ahead log."),
                ],
                question_count=2,
            ),
        )
    )
    final = await wait_terminal(service.stub, [til.job.id, recall.job.id], timeout=20)
    assert final[til.job.id].til_generation_result.title == "TIL 2026-11-29"
    assert "gRPC 스트림" in final[til.job.id].til_generation_result.body
    questions = final[recall.job.id].recall_generation_result.questions
    assert [q.source_index for q in questions] == [0, 1]


async def test_bad_input_names_each_field(service: Service) -> None:
    error = await call_error(
        service.stub.Enqueue(
            pb.EnqueueRequest(
                job_type=pb.JOB_TYPE_UNSPECIFIED,
                target_id="",
                card_analysis_input=pb.CardAnalysisInput(text=""),
            )
        )
    )
    rich = rich_error(error)
    assert rich.code == grpc.StatusCode.INVALID_ARGUMENT
    assert rich.domain == "jobs.san"
    assert {"job_type", "target_id"} <= set(rich.field_violations)


async def test_text_limit_is_configurable(start_service: StartService) -> None:
    service = await start_service(max_text_chars=10)
    error = await call_error(service.stub.Enqueue(card_request("t", "x" * 11)))
    assert "card_analysis_input.text" in rich_error(error).field_violations


async def test_duplicate_active_job_is_rejected_or_returned(service: Service) -> None:
    service.gateway.script = lambda _job, _attempt: Hang()
    first = (await service.stub.Enqueue(card_request("scrap-dup", "Some text."))).job
    error = await call_error(service.stub.Enqueue(card_request("scrap-dup", "Other text.")))
    rich = rich_error(error)
    assert rich.code == grpc.StatusCode.ALREADY_EXISTS
    assert rich.reason == "DUPLICATE_JOB"
    assert rich.metadata == {"existingJobId": first.id}
    again = await service.stub.Enqueue(
        card_request("scrap-dup", "Other text.", on_duplicate=pb.ON_DUPLICATE_RETURN_EXISTING)
    )
    assert again.deduplicated and again.job.id == first.id
    # Another type on the same target is a different slot.
    til = await service.stub.Enqueue(
        pb.EnqueueRequest(
            job_type=pb.JOB_TYPE_TIL_GENERATION,
            target_id="scrap-dup",
            til_generation_input=pb.TilGenerationInput(day="2026-11-29", notes=["n"]),
        )
    )
    assert til.job.id != first.id


async def test_double_click_race_makes_one_job(service: Service) -> None:
    service.gateway.script = lambda _job, _attempt: Hang()
    results = await asyncio.gather(
        *(service.stub.Enqueue(card_request("scrap-race", "Text.")) for _ in range(10)),
        return_exceptions=True,
    )
    made = [r for r in results if isinstance(r, pb.EnqueueResponse)]
    rejected = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
    assert len(made) == 1
    assert len(rejected) == 9
    assert all(r.code() == grpc.StatusCode.ALREADY_EXISTS for r in rejected)
    assert {rich_error(r).metadata["existingJobId"] for r in rejected} == {made[0].job.id}


async def test_request_id_returns_the_same_job(service: Service) -> None:
    first = await service.stub.Enqueue(card_request("scrap-idem", "Text.", request_id="req-42"))
    second = await service.stub.Enqueue(card_request("scrap-idem", "Text.", request_id="req-42"))
    assert not first.deduplicated
    assert second.deduplicated
    assert second.job.id == first.job.id
    await wait_terminal(service.stub, [first.job.id], timeout=20)
    # Even after it finished, the key still names that job.
    third = await service.stub.Enqueue(card_request("scrap-idem", "Text.", request_id="req-42"))
    assert third.job.id == first.job.id and third.deduplicated


async def test_get_job_errors(service: Service) -> None:
    error = await call_error(service.stub.GetJob(pb.GetJobRequest(job_id="nope")))
    assert rich_error(error).code == grpc.StatusCode.INVALID_ARGUMENT
    assert "job_id" in rich_error(error).field_violations
    missing = str(uuid.uuid4())
    error = await call_error(service.stub.GetJob(pb.GetJobRequest(job_id=missing)))
    rich = rich_error(error)
    assert rich.code == grpc.StatusCode.NOT_FOUND
    assert rich.reason == "JOB_NOT_FOUND" and rich.metadata == {"jobId": missing}


async def test_list_jobs_pages_newest_first_with_filters(service: Service) -> None:
    ids = []
    for index in range(7):
        ids.append(
            (await service.stub.Enqueue(card_request(f"list-{index}", f"Text {index}."))).job.id
        )
    await wait_terminal(service.stub, ids, timeout=20)
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        page = await service.stub.ListJobs(pb.ListJobsRequest(page_size=3, page_token=token))
        seen += [j.id for j in page.jobs]
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert pages == 3
    assert seen == list(reversed(ids))
    only = await service.stub.ListJobs(pb.ListJobsRequest(target_id="list-3"))
    assert [j.id for j in only.jobs] == [ids[3]]
    none = await service.stub.ListJobs(pb.ListJobsRequest(statuses=[pb.JOB_STATUS_FAILED]))
    assert list(none.jobs) == []
    future = Timestamp(seconds=4_000_000_000)
    assert list((await service.stub.ListJobs(pb.ListJobsRequest(created_after=future))).jobs) == []
    error = await call_error(service.stub.ListJobs(pb.ListJobsRequest(page_token="garbage!")))
    assert "page_token" in rich_error(error).field_violations
    error = await call_error(service.stub.ListJobs(pb.ListJobsRequest(page_size=1001)))
    assert "page_size" in rich_error(error).field_violations


async def test_cancel_pending_processing_and_terminal(start_service: StartService) -> None:
    service = await start_service(workers=1)
    holds: dict[str, Held] = {}  # never released: each call runs until it is cancelled
    service.gateway.script = lambda job_id, _attempt: holds.setdefault(job_id, Held())
    running_job = (await service.stub.Enqueue(card_request("c-1", "Text."))).job
    waiting_job = (await service.stub.Enqueue(card_request("c-2", "Text."))).job
    # Its gateway call has arrived: the job is PROCESSING and holds the only slot.
    await asyncio.wait_for(holds.setdefault(running_job.id, Held()).reached.wait(), 10)
    cancelled = (
        await service.stub.CancelJob(pb.CancelJobRequest(job_id=waiting_job.id, reason="user left"))
    ).job
    assert cancelled.status == pb.JOB_STATUS_CANCELLED
    assert cancelled.cancel_reason == "user left" and cancelled.HasField("cancel_time")
    stopped = (await service.stub.CancelJob(pb.CancelJobRequest(job_id=running_job.id))).job
    assert stopped.status == pb.JOB_STATUS_CANCELLED
    for _ in range(100):
        if running_job.id in service.gateway.cancelled:
            break
        await asyncio.sleep(0.02)
    assert running_job.id in service.gateway.cancelled, "the in-flight gateway call must be stopped"
    # Whatever the worker writes for the stopped call, it has written once it lets go of
    # the job (nothing announces that: its in-flight count is polled).
    await wait_until(lambda: service.runtime.worker.in_flight == 0, "the worker to let go")
    still = (await service.stub.GetJob(pb.GetJobRequest(job_id=running_job.id))).job
    assert still.status == pb.JOB_STATUS_CANCELLED, (
        "a cancelled job's late outcome must not be written"
    )
    error = await call_error(service.stub.CancelJob(pb.CancelJobRequest(job_id=running_job.id)))
    rich = rich_error(error)
    assert rich.code == grpc.StatusCode.FAILED_PRECONDITION and rich.reason == "INVALID_JOB_STATE"
    error = await call_error(service.stub.CancelJob(pb.CancelJobRequest(job_id=str(uuid.uuid4()))))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    # The slot is free again after cancellation.
    service.gateway.script = lambda _job, _attempt: None
    fresh = (await service.stub.Enqueue(card_request("c-1", "Text."))).job
    assert fresh.id != running_job.id


async def test_stats_counts_by_type_and_status(service: Service) -> None:
    # Phase by phase, each settled before the next: two cards FAILED, one card
    # COMPLETED, one TIL job held PROCESSING. Three types of row, and the two card
    # rows differ only by status: a count filed under the wrong key shows.
    service.gateway.script = lambda _job, _attempt: Fail(
        grpc.StatusCode.INTERNAL, "JSON Parse Error at line 1", "MALFORMED_RESPONSE"
    )
    failed = [(await service.stub.Enqueue(card_request(f"s-f{i}", "Text."))).job.id for i in (1, 2)]
    await wait_terminal(service.stub, failed, timeout=20)
    service.gateway.script = lambda _job, _attempt: None
    done = (await service.stub.Enqueue(card_request("s-ok", "Text."))).job.id
    await wait_terminal(service.stub, [done], timeout=20)
    hold = Held()
    service.gateway.script = lambda _job, _attempt: hold
    til = pb.TilGenerationInput(day="2025-03-01", notes=["stats count by status"])
    await service.stub.Enqueue(
        pb.EnqueueRequest(
            job_type=pb.JOB_TYPE_TIL_GENERATION, target_id="s-til", til_generation_input=til
        )
    )
    await asyncio.wait_for(hold.reached.wait(), 20)  # the TIL job is PROCESSING
    stats = await service.stub.GetJobStats(pb.GetJobStatsRequest())
    counts = {(c.job_type, c.status): c.count for c in stats.counts}
    hold.release()
    assert counts == {
        (pb.JOB_TYPE_CARD_ANALYSIS, pb.JOB_STATUS_FAILED): 2,
        (pb.JOB_TYPE_CARD_ANALYSIS, pb.JOB_STATUS_COMPLETED): 1,
        (pb.JOB_TYPE_TIL_GENERATION, pb.JOB_STATUS_PROCESSING): 1,
    }
    assert len(stats.counts) == 3, "one row per (type, status)"


async def test_list_all_helper_sees_everything(service: Service) -> None:
    ids = [(await service.stub.Enqueue(card_request(f"all-{i}", "Text."))).job.id for i in range(3)]
    await wait_terminal(service.stub, ids, timeout=20)
    assert {j.id for j in await list_all(service.stub)} == set(ids)
