"""JobsClient: the client's behaviour over the in-memory JobService of
san_jobs.client.testing (requests, typed errors, pages, wait and watch), the
channel's retries against a real server, a blocking channel given as such
(grpc_testing), and the blocking layer itself (its thread, callbacks, Ctrl-C)."""

from __future__ import annotations

import _thread
import gc
import inspect
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, get_type_hints

import grpc
import grpc_testing
import pytest
from _clients_support import error_info, make_job, rich_trailers

from san_jobs.client import (
    AsyncJobsClient,
    CardAnalysisInput,
    CardAnalysisResult,
    DuplicateJobError,
    EnqueueRequest,
    FieldViolation,
    InvalidJobStateError,
    InvalidRequestError,
    JobNotFoundError,
    JobsClient,
    JobsError,
    PermissionDeniedError,
    RateLimitedError,
    ServiceUnavailableError,
    TilGenerationInput,
    UnauthenticatedError,
    WaitTimeoutError,
)
from san_jobs.client._channel import RETRY_POLICY, ChannelSettings
from san_jobs.client.testing import FakeJobService
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc

SERVICE = pb.DESCRIPTOR.services_by_name["JobService"]
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE


@pytest.fixture
def service() -> FakeJobService:
    return FakeJobService()


@pytest.fixture
def client(service: FakeJobService) -> Iterator[JobsClient]:
    with service.client(token="s3cret") as client:
        yield client


def card(target: str = "scrap-1", text: str = "some text") -> CardAnalysisInput:
    return CardAnalysisInput(text=text)


def client_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "san-jobs-client"]


# -- requests and answers ----------------------------------------------------


def test_enqueue_sends_typed_request_with_token_and_idempotency_key(
    service: FakeJobService, client: JobsClient
) -> None:
    response = client.enqueue(
        "scrap-1", CardAnalysisInput(text="hello", url="https://x.test"), max_attempts=2
    )
    (call,) = service.calls
    assert call.rpc == "Enqueue"
    assert call.metadata["authorization"] == "Bearer s3cret"
    request = call.request
    assert isinstance(request, pb.EnqueueRequest)
    assert request.job_type == pb.JOB_TYPE_CARD_ANALYSIS
    assert request.target_id == "scrap-1"
    assert request.card_analysis_input.text == "hello"
    assert request.max_attempts == 2
    assert request.on_duplicate == pb.ON_DUPLICATE_REJECT
    assert len(request.request_id) == 36  # a generated UUID makes retries idempotent
    assert response.job.id == service.jobs[0].id
    assert response.job.status == pb.JOB_STATUS_PENDING
    assert not response.job.HasField("card_analysis_input")  # Enqueue answers no input
    assert not response.deduplicated


def test_enqueue_infers_til_type_and_passes_return_existing(
    service: FakeJobService, client: JobsClient
) -> None:
    notes = TilGenerationInput(day="2026-11-29", notes=["a", "b"])
    first = client.enqueue("2026-11-29", notes, request_id="key-1")
    again = client.enqueue("2026-11-29", notes, return_existing=True)
    sent = [call.request for call in service.calls]
    assert isinstance(sent[0], pb.EnqueueRequest) and isinstance(sent[1], pb.EnqueueRequest)
    assert sent[0].request_id == "key-1"
    assert sent[1].job_type == pb.JOB_TYPE_TIL_GENERATION
    assert list(sent[1].til_generation_input.notes) == ["a", "b"]
    assert sent[1].on_duplicate == pb.ON_DUPLICATE_RETURN_EXISTING
    assert again.deduplicated and again.job.id == first.job.id


def test_duplicate_carries_existing_job_id(client: JobsClient) -> None:
    existing = client.enqueue("scrap-1", card()).job
    with pytest.raises(DuplicateJobError) as caught:
        client.enqueue("scrap-1", card())
    assert caught.value.existing_job_id == existing.id
    assert caught.value.reason == "DUPLICATE_JOB"
    assert caught.value.code is grpc.StatusCode.ALREADY_EXISTS
    assert existing.id in str(caught.value)


def test_invalid_request_carries_field_violations(client: JobsClient) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        client.enqueue(" ", CardAnalysisInput(text=""))
    assert caught.value.field_violations == (
        FieldViolation("target_id", "is required and must not be blank"),
    )
    assert caught.value.reason == "INVALID_REQUEST"


@pytest.mark.parametrize(
    ("code", "reason", "expected"),
    [
        (grpc.StatusCode.NOT_FOUND, "JOB_NOT_FOUND", JobNotFoundError),
        (grpc.StatusCode.FAILED_PRECONDITION, "INVALID_JOB_STATE", InvalidJobStateError),
        (grpc.StatusCode.UNAVAILABLE, "", ServiceUnavailableError),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "", ServiceUnavailableError),
        (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED", UnauthenticatedError),
        (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED", PermissionDeniedError),
        (grpc.StatusCode.INTERNAL, "", JobsError),
    ],
)
def test_status_codes_become_typed_errors(
    service: FakeJobService,
    client: JobsClient,
    code: grpc.StatusCode,
    reason: str,
    expected: type[JobsError],
) -> None:
    metadata = {"jobId": "j1", "status": "COMPLETED"} if reason else {}
    service.fail_next(
        "CancelJob", JobsError("it failed", code=code, reason=reason, metadata=metadata)
    )
    with pytest.raises(expected) as caught:
        client.cancel_job(str(uuid.uuid4()), reason="no longer needed")
    request = service.calls[-1].request
    assert isinstance(request, pb.CancelJobRequest) and request.reason == "no longer needed"
    assert type(caught.value) is expected
    assert caught.value.code is code
    assert str(caught.value) == "it failed"
    assert caught.value.metadata == metadata
    if isinstance(caught.value, InvalidJobStateError):
        assert caught.value.status == "COMPLETED"


def test_plain_status_without_details_still_maps(
    service: FakeJobService, client: JobsClient
) -> None:
    service.fail_next("GetJob", JobsError("no such job", code=grpc.StatusCode.NOT_FOUND))
    with pytest.raises(JobNotFoundError, match="no such job") as caught:
        client.get_job(str(uuid.uuid4()))
    assert caught.value.reason == "" and caught.value.job_id == ""


def test_rate_limited_carries_retry_delay(service: FakeJobService, client: JobsClient) -> None:
    service.fail_next(
        "GetJobStats",
        RateLimitedError(
            "slow down",
            code=grpc.StatusCode.RESOURCE_EXHAUSTED,
            reason="RATE_LIMITED",
            retry_delay=2.5,
        ),
    )
    with pytest.raises(RateLimitedError) as caught:
        client.get_job_stats()
    assert caught.value.retry_delay == pytest.approx(2.5)
    assert caught.value.reason == "RATE_LIMITED"
    assert client.get_job_stats().counts == []  # once only


def test_list_and_iter_jobs_follow_pages(service: FakeJobService, client: JobsClient) -> None:
    since = datetime.now(UTC) - timedelta(minutes=1)
    ids = [client.enqueue(f"scrap-{i}", card()).job.id for i in range(3)]
    service.fail(ids[0], "Timeout: 30s")
    service.fail(ids[1], "Rate Limit Exceeded")
    service.fail(ids[2], "Timeout: 60s")
    found = [
        job.id
        for job in client.iter_jobs(
            statuses=[pb.JOB_STATUS_FAILED],
            error_message_contains="Timeout",
            created_after=since,
            page_size=1,
        )
    ]
    assert found == [ids[2], ids[0]]  # newest first
    pages = [c.request for c in service.calls if c.rpc == "ListJobs"]
    assert len(pages) == 2
    for page in pages:
        assert isinstance(page, pb.ListJobsRequest)
        assert list(page.statuses) == [pb.JOB_STATUS_FAILED]
        assert page.error_message_contains == "Timeout"
        assert page.created_after.ToDatetime(tzinfo=UTC) == since
    assert isinstance(pages[0], pb.ListJobsRequest) and pages[0].page_token == ""
    one = client.list_jobs(statuses=[pb.JOB_STATUS_FAILED], page_size=2)
    assert len(one.jobs) == 2 and one.next_page_token


def test_retry_failed_request(service: FakeJobService, client: JobsClient) -> None:
    ids = [client.enqueue(f"scrap-{i}", card()).job.id for i in range(2)]
    for job_id in ids:
        service.fail(job_id, "Timeout: 30s")
    preview = client.retry_failed(
        job_types=[pb.JOB_TYPE_CARD_ANALYSIS], error_message_contains="Timeout", dry_run=True
    )
    request = service.calls[-1].request
    assert isinstance(request, pb.RetryFailedRequest) and request.dry_run
    assert list(request.job_types) == [pb.JOB_TYPE_CARD_ANALYSIS]
    assert sorted(preview.job_ids) == sorted(ids) and preview.retried_count == 0
    done = client.retry_failed(job_ids=ids[:1])
    assert list(done.job_ids) == ids[:1] and done.retried_count == 1
    assert client.get_job(ids[0]).status == pb.JOB_STATUS_PENDING


def test_wait_returns_terminal_job_from_stream(service: FakeJobService, client: JobsClient) -> None:
    job = client.enqueue("scrap-1", card()).job

    def finish() -> None:
        service.start(job.id)
        service.complete(job.id, CardAnalysisResult(summary="Done."))

    threading.Timer(0.05, finish).start()
    done = client.wait(job.id, timeout=10)
    assert done.status == pb.JOB_STATUS_COMPLETED
    assert done.card_analysis_result.summary == "Done."
    assert [c.rpc for c in service.calls] == ["Enqueue", "StreamJobUpdates"]  # no polling


def test_watch_falls_back_to_polling_when_stream_breaks(
    service: FakeJobService, client: JobsClient
) -> None:
    job = client.enqueue("scrap-1", card()).job
    updates = client.watch(job.id, timeout=10, poll_interval=0.01)
    assert next(updates).status == pb.JOB_STATUS_PENDING  # from the stream
    service.break_streams()
    service.fail_next("GetJob", ServiceUnavailableError("still down", code=UNAVAILABLE))
    threading.Timer(0.1, lambda: service.fail(job.id, "Timeout: 30s")).start()
    # The same PENDING state seen again by polling is not reported twice; one
    # unavailable poll is tolerated.
    assert [j.status for j in updates] == [pb.JOB_STATUS_FAILED]
    polls = [c.rpc for c in service.calls].count("GetJob")
    assert polls >= 3


def test_wait_for_unknown_job_raises_not_found(client: JobsClient) -> None:
    with pytest.raises(JobNotFoundError):
        client.wait(str(uuid.uuid4()), timeout=10)


def test_wait_times_out(client: JobsClient) -> None:
    job = client.enqueue("scrap-1", card()).job
    with pytest.raises(WaitTimeoutError, match=r"not finished after 0\.2s"):
        client.wait(job.id, timeout=0.2, poll_interval=0.05)


# -- the channel's retries, on a real channel to a real server ---------------


class _FlakyJobService(pb_grpc.JobServiceServicer):
    """A real JobService whose GetJob fails `failures` times with `code`, then answers;
    it counts the calls that reached it."""

    def __init__(self, failures: int, code: grpc.StatusCode) -> None:
        self.failures = failures
        self.code = code
        self.calls = 0

    def GetJob(self, request: pb.GetJobRequest, context: grpc.ServicerContext) -> pb.GetJobResponse:
        self.calls += 1
        if self.calls <= self.failures:
            context.abort(self.code, "instance going away")
        return pb.GetJobResponse(job=make_job(job_id=request.job_id))


@contextmanager
def flaky_job_service(
    failures: int, code: grpc.StatusCode = UNAVAILABLE
) -> Iterator[tuple[_FlakyJobService, str]]:
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    service = _FlakyJobService(failures, code)
    pb_grpc.add_JobServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield service, f"127.0.0.1:{port}"
    finally:
        server.stop(None)


# Retries are the channel's (its service config), so they are tested on a real channel
# to a real server: the fake and the scripted channel have no channel options.
def test_unavailable_is_retried_until_it_succeeds() -> None:
    with flaky_job_service(failures=2) as (service, address), JobsClient(address) as client:
        job = client.get_job("j-retried")
    assert job.id == "j-retried"
    assert service.calls == 3


def test_retries_stop_after_max_attempts() -> None:
    with (
        flaky_job_service(failures=100) as (service, address),
        JobsClient(address) as client,
        pytest.raises(ServiceUnavailableError),
    ):
        client.get_job("j-down")
    assert service.calls == RETRY_POLICY["maxAttempts"]


def test_other_codes_are_answers_not_retried() -> None:
    with (
        flaky_job_service(failures=1, code=grpc.StatusCode.INTERNAL) as (service, address),
        JobsClient(address) as client,
        pytest.raises(JobsError) as caught,
    ):
        client.get_job("j-broken")
    assert caught.value.code == grpc.StatusCode.INTERNAL
    assert service.calls == 1


def test_channel_options_keepalive_and_message_sizes() -> None:
    options = dict(ChannelSettings().options())
    assert options["grpc.keepalive_time_ms"] > 0
    assert options["grpc.max_receive_message_length"] >= 4 * 1024 * 1024


# -- a blocking channel given as such (interceptors, grpc_testing) -----------


def method(name: str) -> Any:
    return SERVICE.methods_by_name[name]


@pytest.fixture
def scripted() -> Iterator[tuple[Any, JobsClient]]:
    channel = grpc_testing.channel([SERVICE], grpc_testing.strict_real_time())
    with JobsClient(channel=channel, token="s3cret") as client:
        yield channel, client


def test_a_given_blocking_channel_carries_the_calls_and_their_errors(
    scripted: tuple[Any, JobsClient],
) -> None:
    channel, client = scripted
    with ThreadPoolExecutor(max_workers=1) as pool:
        sent = pool.submit(client.enqueue, "scrap-1", card())
        metadata, request, rpc = channel.take_unary_unary(method("Enqueue"))
        assert ("authorization", "Bearer s3cret") in metadata
        assert request.card_analysis_input.text == "some text"
        rpc.terminate(pb.EnqueueResponse(job=make_job(job_id="j-7")), (), grpc.StatusCode.OK, "")
        assert sent.result(timeout=5).job.id == "j-7"

        refused = pool.submit(client.enqueue, "scrap-1", card())
        _, _, rpc = channel.take_unary_unary(method("Enqueue"))
        code = grpc.StatusCode.ALREADY_EXISTS
        details = error_info("DUPLICATE_JOB", existingJobId="j-7")
        rpc.terminate(None, rich_trailers(code, "exists", details), code, "exists")
        with pytest.raises(DuplicateJobError) as caught:
            refused.result(timeout=5)
    assert caught.value.existing_job_id == "j-7"


def test_a_given_blocking_channel_streams(scripted: tuple[Any, JobsClient]) -> None:
    channel, client = scripted
    with ThreadPoolExecutor(max_workers=1) as pool:
        waited = pool.submit(client.wait, "j1", 10)
        _, request, rpc = channel.take_unary_stream(method("StreamJobUpdates"))
        assert list(request.job_ids) == ["j1"]
        rpc.send_response(pb.StreamJobUpdatesResponse(job=make_job(job_id="j1")))
        done = make_job(pb.JOB_STATUS_COMPLETED, job_id="j1", attempt=1, summary="Done.")
        rpc.send_response(pb.StreamJobUpdatesResponse(job=done))
        rpc.terminate((), grpc.StatusCode.OK, "")
        job = waited.result(timeout=5)
    assert job.status == pb.JOB_STATUS_COMPLETED
    assert job.card_analysis_result.summary == "Done."


# -- the blocking layer -------------------------------------------------------


def test_the_blocking_client_has_every_method_of_the_asyncio_client() -> None:
    """One implementation: each public method of AsyncJobsClient is JobsClient's too,
    with the same parameters and documentation."""
    public = {
        name
        for name, member in vars(AsyncJobsClient).items()
        if not name.startswith("_") and inspect.isfunction(member) and name != "close"
    }
    assert public <= set(vars(JobsClient))
    for name in public:
        mine, theirs = getattr(JobsClient, name), getattr(AsyncJobsClient, name)
        expected = inspect.signature(theirs, eval_str=True).parameters
        assert inspect.signature(mine).parameters == expected, name
        assert mine.__doc__ == theirs.__doc__
        hints = get_type_hints(mine)  # resolvable, as for any method
        assert {k: v for k, v in hints.items() if k != "return"} == {
            k: v for k, v in get_type_hints(theirs).items() if k != "return"
        }
    assert inspect.signature(JobsClient.__init__) == inspect.signature(AsyncJobsClient.__init__)


def test_on_chunk_runs_in_the_callers_thread_and_may_call_the_client(
    client: JobsClient,
) -> None:
    heard: list[tuple[str, int, int]] = []

    def on_chunk(start: int, outcomes: Any) -> None:
        job = client.get_job(outcomes[0].job.id)  # the client is free meanwhile
        heard.append((threading.current_thread().name, start, job.attempt_count))

    requests = [
        EnqueueRequest(target_id=f"t-{i}", card_analysis_input=CardAnalysisInput(text="x"))
        for i in range(3)
    ]
    outcomes = client.enqueue_many(requests, batch_size=2, on_chunk=on_chunk)
    assert [o.ok for o in outcomes] == [True, True, True]
    me = threading.current_thread().name
    assert heard == [(me, 0, 0), (me, 2, 0)]


def test_an_error_in_on_chunk_is_raised_by_enqueue_many(client: JobsClient) -> None:
    def on_chunk(start: int, outcomes: Any) -> None:
        raise LookupError("the caller's own")

    request = EnqueueRequest(target_id="t", card_analysis_input=CardAnalysisInput(text="x"))
    with pytest.raises(LookupError, match="the caller's own"):
        client.enqueue_many([request], on_chunk=on_chunk)


@pytest.fixture
def ctrl_c_reaches_python() -> Iterator[None]:
    """SIGINT raising KeyboardInterrupt here, as in a terminal: a process started in the
    background by a non-interactive shell (`make test &`) inherits SIGINT ignored, and
    then no Ctrl-C reaches anything."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("ctrl_c_reaches_python")
def test_ctrl_c_cancels_the_call_it_interrupts(service: FakeJobService, client: JobsClient) -> None:
    job = client.enqueue("scrap-1", card()).job
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        threading.Timer(0.2, _thread.interrupt_main).start()
        client.wait(job.id)  # would wait for ever
    assert time.monotonic() - started < 5
    deadline = time.monotonic() + 5
    while service._watchers and time.monotonic() < deadline:  # the stream was cancelled
        time.sleep(0.01)
    assert not service._watchers
    assert client.get_job(job.id).id == job.id  # the client goes on


async def test_a_blocking_client_works_inside_a_running_event_loop(
    service: FakeJobService,
) -> None:
    with service.client() as client:  # blocks this loop's thread while it waits, no more
        job = client.enqueue("scrap-1", card()).job
        service.complete(job.id, CardAnalysisResult(summary="s"))
        assert client.wait(job.id, timeout=5).status == pb.JOB_STATUS_COMPLETED


def test_close_ends_the_thread_and_later_calls_fail(service: FakeJobService) -> None:
    before = len(client_threads())
    client = service.client()
    assert len(client_threads()) == before + 1
    client.close()
    client.close()  # once is enough; twice is harmless
    assert len(client_threads()) == before
    with pytest.raises(ValueError, match="closed"):
        client.get_job(str(uuid.uuid4()))


def test_a_forgotten_client_is_closed_when_collected(service: FakeJobService) -> None:
    before = len(client_threads())
    client = service.client()
    client.enqueue("scrap-1", card())
    del client
    gc.collect()
    assert len(client_threads()) == before


def test_an_abandoned_watch_closes_its_stream(service: FakeJobService, client: JobsClient) -> None:
    job = client.enqueue("scrap-1", card()).job
    updates = client.watch(job.id)
    next(updates)
    assert len(service._watchers) == 1
    del updates
    gc.collect()
    assert not service._watchers


def test_a_client_that_cannot_start_leaves_no_thread() -> None:
    before = len(client_threads())
    with pytest.raises(ValueError, match="not PEM"):
        JobsClient("127.0.0.1:1", tls_ca=b"not a certificate")
    assert len(client_threads()) == before


async def test_an_asyncio_channel_is_refused() -> None:
    channel = grpc.aio.insecure_channel("127.0.0.1:1")
    try:
        with pytest.raises(TypeError, match=r"blocking grpc\.Channel"):
            JobsClient(channel=channel)  # type: ignore[arg-type]
    finally:
        await channel.close()
