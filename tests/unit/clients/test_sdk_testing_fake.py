"""san_jobs.client.testing: the in-memory JobService a user's tests put under the
real clients. It answers as JobService does (refusals, duplicates, idempotency keys,
watchers), moves jobs when the test says so, and fails on purpose when told to."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import grpc
import pytest

from san_jobs.client import (
    CardAnalysisInput,
    CardAnalysisResult,
    DuplicateJobError,
    EmbeddingInput,
    EmbeddingResult,
    EnqueueRequest,
    InvalidJobStateError,
    InvalidRequestError,
    JobNotFoundError,
    JobsClient,
    RateLimitedError,
    ServiceUnavailableError,
    TilGenerationInput,
    Usage,
)
from san_jobs.client.testing import FakeJobService
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

TEXT = CardAnalysisInput(text="Some page text")


@pytest.fixture
def service() -> FakeJobService:
    return FakeJobService()


@pytest.fixture
def client(service: FakeJobService) -> Iterator[JobsClient]:
    with service.client() as client:
        yield client


def test_the_module_docstring_example_runs() -> None:
    import san_jobs.client.testing as testing

    example = testing.__doc__ or ""
    code = example.split("::", 1)[1].split("\n\nAs JobService", 1)[0]
    lines = [line.removeprefix("    ") for line in code.strip("\n").splitlines()]
    namespace: dict[str, object] = {}
    exec("\n".join(lines), namespace)
    namespace["test_a_summary_is_shown"]()  # type: ignore[operator]


def test_a_job_moves_as_the_test_moves_it(service: FakeJobService, client: JobsClient) -> None:
    job = client.enqueue("scrap-1", TEXT, requested_by="me").job
    assert job.status == pb.JOB_STATUS_PENDING and job.max_attempts == 3
    assert job.requested_by == "me" and job.create_time.seconds > 0
    service.start(job.id)
    running = client.get_job(job.id)
    assert running.status == pb.JOB_STATUS_PROCESSING and running.attempt_count == 1
    assert running.card_analysis_input.text == "Some page text"  # GetJob has the input
    usage = Usage(model="local", input_tokens=12, output_tokens=3, cached=True)
    service.complete(job.id, CardAnalysisResult(summary="Short.", tags=["a"]), usage=usage)
    done = client.get_job(job.id)
    assert done.status == pb.JOB_STATUS_COMPLETED
    assert done.card_analysis_result.summary == "Short."
    assert done.HasField("complete_time") and done.attempts[0].HasField("end_time")
    assert done.attempts[0].usage == usage
    assert [j.id for j in service.jobs] == [job.id] and service.job(job.id) == done


def test_a_failed_job_carries_the_error(service: FakeJobService, client: JobsClient) -> None:
    job = client.enqueue("scrap-1", TEXT).job
    failed = service.fail(job.id, "Timeout: 30s", code="DEADLINE_EXCEEDED", reason="SLOW")
    assert failed.status == pb.JOB_STATUS_FAILED and failed.attempt_count == 1
    seen = client.get_job(job.id)
    assert (seen.error_message, seen.error_code, seen.error_reason) == (
        "Timeout: 30s",
        "DEADLINE_EXCEEDED",
        "SLOW",
    )
    assert seen.attempts[0].error_message == "Timeout: 30s" and seen.HasField("fail_time")


def test_moving_a_job_wrongly_is_the_tests_mistake(
    service: FakeJobService, client: JobsClient
) -> None:
    job = client.enqueue("scrap-1", TEXT).job
    with pytest.raises(TypeError, match="takes CardAnalysisResult, not EmbeddingResult"):
        service.complete(job.id, EmbeddingResult(vector=[1.0]))
    assert service.job(job.id).status == pb.JOB_STATUS_PENDING  # left as it was
    service.complete(job.id, CardAnalysisResult(summary="s"))
    with pytest.raises(ValueError, match="is COMPLETED, not PENDING"):
        service.start(job.id)
    with pytest.raises(KeyError):
        service.fail("no-such-job")


def test_run_completes_each_job_at_once_or_fails_it() -> None:
    def run(job: pb.Job) -> EmbeddingResult:
        if job.target_id == "bad":
            raise RuntimeError("the model said no")
        return EmbeddingResult(vector=[0.6, 0.8], model="m")

    service = FakeJobService(run=run)
    with service.client() as client:
        enqueued = client.enqueue("good", EmbeddingInput(text="x"))
        assert enqueued.job.status == pb.JOB_STATUS_PENDING  # the answer: as stored
        done = client.wait(enqueued.job.id, timeout=5)
        assert done.status == pb.JOB_STATUS_COMPLETED
        assert list(done.embedding_result.vector) == pytest.approx([0.6, 0.8])
        failed = client.wait(client.enqueue("bad", EmbeddingInput(text="x")).job.id, timeout=5)
        assert failed.status == pb.JOB_STATUS_FAILED
        assert failed.error_message == "the model said no"
        # A retried job runs again (and fails again here).
        assert client.retry_failed(job_ids=[failed.id]).retried_count == 1
        again = client.get_job(failed.id)
        assert again.status == pb.JOB_STATUS_FAILED and again.attempt_count == 2


def test_duplicates_are_refused_or_returned_as_the_service_does(
    service: FakeJobService, client: JobsClient
) -> None:
    first = client.enqueue("scrap-1", TEXT, request_id="key-1").job
    with pytest.raises(DuplicateJobError) as caught:
        client.enqueue("scrap-1", TEXT)
    assert caught.value.existing_job_id == first.id
    returned = client.enqueue("scrap-1", TEXT, return_existing=True)
    assert returned.deduplicated and returned.job.id == first.id
    other_type = client.enqueue("scrap-1", EmbeddingInput(text="x"))  # (type, target) is the key
    assert not other_type.deduplicated
    service.complete(first.id, CardAnalysisResult(summary="s"))
    # The same request_id is the same job, even once it is finished ...
    repeated = client.enqueue("scrap-1", TEXT, request_id="key-1")
    assert repeated.deduplicated and repeated.job.id == first.id
    assert repeated.job.status == pb.JOB_STATUS_COMPLETED
    # ... and a finished job no longer blocks its target.
    assert not client.enqueue("scrap-1", TEXT).deduplicated


def test_enqueue_refuses_what_the_service_refuses(client: JobsClient) -> None:
    requests = [
        EnqueueRequest(
            job_type=pb.JOB_TYPE_TIL_GENERATION, target_id="t", card_analysis_input=TEXT
        ),
        EnqueueRequest(job_type=pb.JOB_TYPE_EMBEDDING, target_id="t"),
        EnqueueRequest(target_id="t", card_analysis_input=TEXT, max_attempts=101),
        EnqueueRequest(target_id="x" * 257, til_generation_input=TilGenerationInput(day="d")),
    ]
    outcomes = client.enqueue_many(requests)
    fields = [
        [v.field for v in o.error.field_violations]
        for o in outcomes
        if isinstance(o.error, InvalidRequestError)
    ]
    # Named as Enqueue names them, not "requests[i]....".
    assert fields == [["card_analysis_input"], ["embedding_input"], ["max_attempts"], ["target_id"]]
    with pytest.raises(InvalidRequestError, match="job_id"):
        client.get_job("not-a-uuid")
    with pytest.raises(JobNotFoundError) as missing:
        client.get_job(str(uuid.uuid4()))
    assert missing.value.reason == "JOB_NOT_FOUND" and missing.value.job_id


def test_cancel_as_the_service_does(service: FakeJobService, client: JobsClient) -> None:
    job = client.enqueue("scrap-1", TEXT).job
    service.start(job.id)
    cancelled = client.cancel_job(job.id, reason="not needed")
    assert cancelled.status == pb.JOB_STATUS_CANCELLED and cancelled.cancel_reason == "not needed"
    assert cancelled.attempts[0].error_code == "CANCELLED"
    with pytest.raises(InvalidJobStateError) as caught:
        client.cancel_job(job.id)
    assert caught.value.status == "CANCELLED" and caught.value.job_id == job.id


async def test_watchers_hear_every_change(service: FakeJobService) -> None:
    async with service.async_client() as client:
        feed = client.stream_job_updates(statuses=[pb.JOB_STATUS_COMPLETED])
        first = asyncio.ensure_future(anext(feed))
        await asyncio.sleep(0.01)  # the feed is open
        one = (await client.enqueue("one", TEXT)).job
        two = (await client.enqueue("two", TEXT)).job
        named = client.stream_job_updates([one.id])
        assert (await anext(named)).status == pb.JOB_STATUS_PENDING
        service.fail(two.id, "no")  # not COMPLETED: not in the feed
        service.complete(one.id, CardAnalysisResult(summary="s"))
        heard = await asyncio.wait_for(first, 5)
        assert heard.id == one.id and heard.status == pb.JOB_STATUS_COMPLETED
        # A stream of named jobs: each state, then the end once all are terminal.
        assert [j.status async for j in named] == [
            pb.JOB_STATUS_PROCESSING,
            pb.JOB_STATUS_COMPLETED,
        ]
        await feed.aclose()
    assert not service._watchers


def test_a_test_thread_moves_jobs_while_clients_wait(service: FakeJobService) -> None:
    async def wait_async(job_id: str) -> int:
        async with service.async_client() as client:
            return int((await client.wait(job_id, timeout=10)).status)

    with service.client() as client:
        job = client.enqueue("scrap-1", TEXT).job
        waiting = threading.Thread(target=lambda: seen.append(asyncio.run(wait_async(job.id))))
        seen: list[int] = []
        waiting.start()
        threading.Timer(0.1, service.complete, (job.id, CardAnalysisResult())).start()
        assert client.wait(job.id, timeout=10).status == pb.JOB_STATUS_COMPLETED
        waiting.join(10)
    assert seen == [pb.JOB_STATUS_COMPLETED]


def test_lists_stats_usage_and_failure_groups(service: FakeJobService, client: JobsClient) -> None:
    ids = [client.enqueue(f"t-{i}", TEXT).job.id for i in range(4)]
    service.complete(ids[0], CardAnalysisResult(), usage=Usage(model="m", input_tokens=5))
    service.fail(ids[1], "Timeout: 30s", code="DEADLINE_EXCEEDED")
    service.fail(ids[2], "Timeout: 30s", code="DEADLINE_EXCEEDED")
    stats = client.get_job_stats()
    assert {(c.status, c.count) for c in stats.counts} == {
        (pb.JOB_STATUS_PENDING, 1),
        (pb.JOB_STATUS_COMPLETED, 1),
        (pb.JOB_STATUS_FAILED, 2),
    }
    assert stats.HasField("oldest_pending_create_time")
    (total,) = client.get_usage().totals
    assert (total.model, total.attempts, total.input_tokens) == ("m", 1, 5)
    later = datetime.now(UTC) + timedelta(hours=1)
    assert not client.get_usage(start_time=later, end_time=later + timedelta(hours=1)).totals
    (group,) = client.list_failure_groups().groups
    assert (group.error_code, group.message_prefix, group.count) == (
        "DEADLINE_EXCEEDED",
        "Timeout: 30s",
        2,
    )
    assert group.example_job_id == ids[2]
    assert [j.id for j in client.list_jobs(target_id="t-3").jobs] == [ids[3]]
    with pytest.raises(InvalidRequestError, match="page_token"):
        client.list_jobs(page_token="not ours")
    with pytest.raises(InvalidRequestError, match="all_failed"):
        client.retry_failed()
    pruned = client.prune_jobs(dry_run=True)
    assert pruned.dry_run and not pruned.counts  # no retention in memory: nothing is due


def test_fail_next_makes_the_next_calls_fail(service: FakeJobService, client: JobsClient) -> None:
    limited = RateLimitedError(
        "slow down", code=grpc.StatusCode.RESOURCE_EXHAUSTED, reason="RATE_LIMITED", retry_delay=1
    )
    service.fail_next("Enqueue", limited, times=2)
    for _ in range(2):
        with pytest.raises(RateLimitedError) as caught:
            client.enqueue("scrap-1", TEXT)
        assert caught.value.retry_delay == 1
    assert client.enqueue("scrap-1", TEXT).job.id
    assert [c.rpc for c in service.calls] == ["Enqueue"] * 3  # the failed ones were called
    with pytest.raises(ValueError, match="no RPC 'enqueue'"):
        service.fail_next("enqueue", limited)


def test_a_stream_failing_at_once_makes_watch_poll(
    service: FakeJobService, client: JobsClient
) -> None:
    job = client.enqueue("scrap-1", TEXT).job
    down = ServiceUnavailableError("down", code=grpc.StatusCode.UNAVAILABLE)
    service.fail_next("StreamJobUpdates", down)
    updates = client.watch(job.id, poll_interval=0.01)
    assert next(updates).status == pb.JOB_STATUS_PENDING  # polled
    service.complete(job.id, CardAnalysisResult())
    assert [j.status for j in updates] == [pb.JOB_STATUS_COMPLETED]
    assert [c.rpc for c in service.calls][:3] == ["Enqueue", "StreamJobUpdates", "GetJob"]


async def test_the_change_feed_sends_each_change_after_a_cursor_then_live() -> None:
    service = FakeJobService()
    async with service.async_client() as client:
        done = (await client.enqueue("scrap-1", TEXT)).job
        service.complete(done.id, CardAnalysisResult(summary="Short."))
        failed = (await client.enqueue("scrap-2", TEXT)).job
        service.fail(failed.id, "Timeout: too slow")
        await client.retry_failed(job_ids=[failed.id])
        changes = client.stream_job_changes()
        got = [await anext(changes) for _ in range(3)]
        assert [(c.job.id, c.job.status) for c in got] == [
            (done.id, pb.JOB_STATUS_COMPLETED),
            (failed.id, pb.JOB_STATUS_FAILED),
            (failed.id, pb.JOB_STATUS_PENDING),
        ]
        assert got[0].job.card_analysis_result.summary == "Short."
        assert got[0].job.WhichOneof("input") is None
        # Live: a change made while the stream waits arrives.
        later = asyncio.ensure_future(anext(changes))
        await asyncio.sleep(0.01)
        service.complete(failed.id, CardAnalysisResult(summary="Second try."))
        assert (await asyncio.wait_for(later, 5)).job.status == pb.JOB_STATUS_COMPLETED
        await changes.aclose()
        # Resumed after the first, filtered: the completions after it only.
        resumed = client.stream_job_changes(got[0].cursor, statuses=[pb.JOB_STATUS_COMPLETED])
        assert (await anext(resumed)).job.id == failed.id
        await resumed.aclose()
        with pytest.raises(InvalidRequestError) as caught:
            await anext(client.stream_job_changes("nonsense"))
        assert [v.field for v in caught.value.field_violations] == ["after_cursor"]
