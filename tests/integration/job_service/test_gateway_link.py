"""The link from JobService to AiGateway under abuse (issue 9, points 1, 9, 10): a
call too big to send fails its job alone and the shared stream lives on; untrusted
RetryInfo delays are clamped; an outcome that cannot be recorded still ends the
job; a gateway that is back after an outage is found at once."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from san_jobs.job_service.domain.model import Job, JobStatus, JobType, NewJob, OnDuplicate
from san_jobs.job_service.domain.ports import EnqueueParams
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from tests.integration.job_service.conftest import Service, StartService
from tests.integration.job_service.scripted_gateway import (
    Fail,
    ScriptedGateway,
    Slow,
    start_scripted_gateway,
)
from tests.support.jobs_api import card_request, free_port, wait_terminal

# The real gateway's receive and send limit (its --max-message-bytes default).
GATEWAY_MESSAGE_BYTES = 16 * 1024 * 1024
GATEWAY_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_receive_message_length", GATEWAY_MESSAGE_BYTES),
    ("grpc.max_send_message_length", GATEWAY_MESSAGE_BYTES),
]


async def wait_for_calls(gateway: ScriptedGateway, job_ids: list[str]) -> None:
    """Until the gateway has received a call for each of `job_ids`."""
    for _ in range(500):
        if all(gateway.calls[job_id] for job_id in job_ids):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"the gateway never saw calls for {job_ids}: {gateway.calls}")


async def stored_when_settled(service: Service, job_id: str) -> Job:
    """The stored job once it is neither PENDING nor PROCESSING."""
    for _ in range(1500):
        job = await service.runtime.store.queries.get(job_id)
        if job.status not in {JobStatus.PENDING, JobStatus.PROCESSING}:
            return job
        await asyncio.sleep(0.02)
    raise AssertionError(f"job {job_id} still {job.status}")


async def test_a_call_too_big_to_send_fails_alone_and_the_stream_survives(
    start_service: StartService,
) -> None:
    # Slow: the normal calls are still in flight when the big one comes up.
    gateway = ScriptedGateway(script=lambda _job, _attempt: Slow(3.0))
    server, address = await start_scripted_gateway(gateway, options=GATEWAY_OPTIONS)
    try:
        service = await start_service(gateway=address, max_attempts=3)
        normal = [
            (await service.stub.Enqueue(card_request(f"n-{i}", f"Normal text {i}."))).job.id
            for i in range(2)
        ]
        await wait_for_calls(gateway, normal)  # both in flight on the shared stream
        # An old row (or one stored under a raised --max-text-chars) bigger than the
        # gateway accepts: written straight to the store, as Enqueue would refuse it.
        big, _ = await service.runtime.store.commands.enqueue(
            EnqueueParams(
                job=NewJob(
                    JobType.CARD_ANALYSIS, "big", {"text": "x" * (17 * 1024 * 1024)}, "", None, 3
                ),
                on_duplicate=OnDuplicate.REJECT,
            )
        )
        service.runtime.worker.wake()
        final = await wait_terminal(service.stub, normal, timeout=60)
        # Read from the store: the big job's input alone is above the response limit.
        failed = await stored_when_settled(service, big.id)
    finally:
        await server.stop(None)
    for job_id in normal:
        job = final[job_id]
        assert job.status == pb.JOB_STATUS_COMPLETED
        assert job.attempt_count == 1, [(a.error_code, a.error_message) for a in job.attempts]
    assert failed.status is JobStatus.FAILED
    assert failed.attempt_count == 1, "refused for good: no retry"
    assert (failed.error_code, failed.error_reason) == ("INVALID_ARGUMENT", "REQUEST_TOO_LARGE")
    message = failed.error_message or ""
    assert message.startswith("Request too large for the AI gateway: 17,"), message
    assert "it was not sent" in message
    assert gateway.calls[big.id] == 0, "never sent"
    assert gateway.streams_opened == 1, "the shared stream was never broken"


@pytest.mark.parametrize("unary_only", [False, True], ids=["stream", "unary"])
async def test_an_answer_too_large_to_store_fails_its_job_alone(
    start_service: StartService, unary_only: bool
) -> None:
    """An untrusted answer can't make a job too big for GetJob or a stream to carry."""
    gateway = ScriptedGateway(unary_only=unary_only)  # its summary is the text's first sentence
    server, address = await start_scripted_gateway(gateway, options=GATEWAY_OPTIONS)
    try:
        service = await start_service(gateway=address, max_attempts=3)
        # First a normal job: against a gateway without StreamCalls, the call that
        # finds that out may be charged an attempt (grpc can report the refused
        # stream as a broken write), which is not what this test is about.
        normal = (await service.stub.Enqueue(card_request("small", "Short text."))).job.id
        await wait_terminal(service.stub, [normal], timeout=30)
        # 1.2 MB in one sentence: an input only a raised --max-text-chars lets in.
        big, _ = await service.runtime.store.commands.enqueue(
            EnqueueParams(
                job=NewJob(
                    JobType.CARD_ANALYSIS, "huge-answer", {"text": "y" * 1_200_000}, "", None, 3
                ),
                on_duplicate=OnDuplicate.REJECT,
            )
        )
        service.runtime.worker.wake()
        final = await wait_terminal(service.stub, [big.id, normal], timeout=30)
    finally:
        await server.stop(None)
    assert final[normal].status == pb.JOB_STATUS_COMPLETED
    job = final[big.id]
    assert job.status == pb.JOB_STATUS_FAILED
    assert (job.error_code, job.error_reason) == ("INTERNAL", "MALFORMED_RESPONSE")
    assert job.error_message.startswith("The AI gateway's answer is too large to store: 1,2")
    assert job.attempt_count == 1, "not retried"
    assert not job.HasField("card_analysis_result")


async def test_a_stream_ended_by_the_gateway_fails_its_calls_as_unavailable(
    start_service: StartService,
) -> None:
    """Whatever status ends the shared stream, the calls on it are retried, and
    their message says the stream ended rather than blaming each call."""
    gateway = ScriptedGateway()
    # A gateway whose receive limit is below what JobService may send: the stream
    # ends with RESOURCE_EXHAUSTED when a bigger (but allowed) call arrives.
    small = [("grpc.max_receive_message_length", 64 * 1024)]
    server, address = await start_scripted_gateway(gateway, options=small)
    try:
        service = await start_service(gateway=address, max_attempts=3)
        gateway.script = lambda _job, attempt: Slow(30.0) if attempt == 1 else None
        first = (await service.stub.Enqueue(card_request("s-1", "Small text."))).job.id
        await wait_for_calls(gateway, [first])
        # Bigger than this gateway's receive limit, far below JobService's own; one
        # attempt, so it breaks the stream once.
        bigger = card_request("s-2", "y" * 90_000, max_attempts=1)
        second = (await service.stub.Enqueue(bigger)).job.id
        final = await wait_terminal(service.stub, [first, second], timeout=60)
    finally:
        await server.stop(None)
    lost = final[first].attempts[0]
    assert lost.error_code == "UNAVAILABLE", (lost.error_code, lost.error_message)
    assert lost.error_message.startswith("AI gateway unavailable: the call stream ended"), (
        lost.error_message
    )
    assert "RESOURCE_EXHAUSTED" in lost.error_message, "the stream's own status, for operators"
    assert final[first].status == pb.JOB_STATUS_COMPLETED


@pytest.mark.parametrize(
    "retry_delay",
    [
        Duration(seconds=2_592_000),  # Retry-After: 30 days
        Duration(seconds=10**12),  # overflows a datetime
        Duration(seconds=2**63 - 1),  # overflows a timedelta
        Duration(seconds=-5),
        Duration(seconds=0, nanos=-999_999_999),
    ],
    ids=["30-days", "1e12s", "int64-max", "negative", "negative-nanos"],
)
async def test_retry_info_delays_are_clamped_to_the_retry_max_delay(
    start_service: StartService, retry_delay: Duration
) -> None:
    # --retry-max-delay 0.2 s (the fixture's): the retry comes at once whatever
    # the gateway asked for.
    service = await start_service(max_attempts=3)
    throttled = Fail(
        grpc.StatusCode.RESOURCE_EXHAUSTED, "Too many requests", "RATE_LIMITED", retry_delay
    )
    service.gateway.script = lambda _job, attempt: throttled if attempt == 1 else None
    job = (await service.stub.Enqueue(card_request("r-1", "Some text."))).job
    final = (await wait_terminal(service.stub, [job.id], timeout=20))[job.id]
    assert final.status == pb.JOB_STATUS_COMPLETED, final.error_message
    assert final.attempt_count == 2
    assert (final.attempts[0].error_code, final.attempts[0].error_reason) == (
        "RESOURCE_EXHAUSTED",
        "RATE_LIMITED",
    )


@contextmanager
def failing(target: Any, name: str, times: int) -> Iterator[list[int]]:
    """Make `target.name` raise RuntimeError on its first `times` calls."""
    original = getattr(target, name)
    calls = [0]

    async def broken(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] <= times:
            raise RuntimeError("SELECT secret FROM somewhere failed")
        return await original(*args, **kwargs)

    setattr(target, name, broken)
    try:
        yield calls
    finally:
        setattr(target, name, original)


async def run_card(service: Service, target_id: str) -> pb.Job:
    job = (await service.stub.Enqueue(card_request(target_id, "Some text."))).job
    return (await wait_terminal(service.stub, [job.id], timeout=20))[job.id]


async def test_an_outcome_that_cannot_be_recorded_fails_the_job_with_an_internal_error(
    start_service: StartService, caplog: pytest.LogCaptureFixture
) -> None:
    service = await start_service()
    caplog.set_level(logging.ERROR, logger="job_service.worker")
    with failing(service.runtime.store.worker, "complete", times=1):
        final = await run_card(service, "o-1")
    assert final.status == pb.JOB_STATUS_FAILED
    assert final.error_code == "INTERNAL"
    assert final.error_message.startswith(
        "Internal error: the outcome could not be recorded (error id "
    ), final.error_message
    assert "secret" not in final.error_message, "no internals reach the caller"
    error_id = final.error_message.rsplit(" ", 1)[-1].rstrip(")")
    logged = [r for r in caplog.records if error_id in r.getMessage()]
    assert logged and final.id in logged[0].getMessage()


async def test_an_unexpected_error_in_the_gateway_call_fails_the_job_without_its_text(
    start_service: StartService, caplog: pytest.LogCaptureFixture
) -> None:
    service = await start_service()
    caplog.set_level(logging.ERROR, logger="job_service.worker")
    with failing(service.runtime.gateway, "run", times=1):
        final = await run_card(service, "o-3")
    assert final.status == pb.JOB_STATUS_FAILED
    assert final.error_code == "INTERNAL"
    assert final.error_message.startswith("Internal error in the job service (error id ")
    assert "secret" not in final.error_message, "no internals reach the caller"
    error_id = final.error_message.rsplit(" ", 1)[-1].rstrip(")")
    logged = [r for r in caplog.records if error_id in r.getMessage()]
    assert logged and final.id in logged[0].getMessage()
    assert "SELECT secret" in (logged[0].exc_text or ""), "the details are in the log"


async def test_when_no_outcome_can_be_written_the_job_is_given_back(
    start_service: StartService,
) -> None:
    service = await start_service()
    store = service.runtime.store
    # complete() fails, then the fallback that fails the job (end_unsettled) too.
    with (
        failing(store.worker, "complete", times=1),
        failing(store.worker, "end_unsettled", times=1),
    ):
        final = await run_card(service, "o-2")
    assert final.status == pb.JOB_STATUS_COMPLETED, "given back as PENDING, then run again"


class EndlessBackoff:
    """A retry policy whose delay no datetime can hold (now + 1e12 s is past 9999)."""

    def delay(self, *_args: Any) -> float:
        return 1e12


async def test_a_retry_time_that_overflows_still_ends_the_job(
    start_service: StartService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defence in depth: even if a retry delay escaped every clamp, the job is not
    left PROCESSING (it was, with an OverflowError in the worker)."""
    service = await start_service(max_attempts=3)
    worker = service.runtime.worker
    config = dataclasses.replace(worker._config, backoff=EndlessBackoff())  # type: ignore[arg-type]
    monkeypatch.setattr(worker, "_config", config)
    service.gateway.script = lambda _job, _attempt: Fail(grpc.StatusCode.UNAVAILABLE, "down")
    final = await run_card(service, "o-3")
    assert final.status == pb.JOB_STATUS_FAILED
    assert final.error_code == "INTERNAL"


async def test_a_gateway_back_after_an_outage_takes_the_next_job_at_once(
    start_service: StartService,
) -> None:
    """The gateway stops; while it is away its address takes connections and never
    answers (a host that is unreachable, or a gateway process that hangs); it comes
    back on the same port. The channel's connection attempt made while it was away
    must not hold the channel long after it is back (grpc's default is 20 s): the
    first job sent after it is back runs on its first attempt."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    server, _ = await start_scripted_gateway(ScriptedGateway(), address)
    # A call waits for a connection as long as its deadline (5 s); after 3 s of it the
    # type is paused, so "during" is given back uncharged and runs once it is back.
    service = await start_service(gateway=address, max_attempts=1, deadline=5.0)
    before = await run_card(service, "before")
    assert before.status == pb.JOB_STATUS_COMPLETED
    await server.stop(None)

    held: list[asyncio.StreamWriter] = []

    async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # accepted, never answered, never closed

    black_hole = await asyncio.start_server(hold, "127.0.0.1", port)
    back: ScriptedGateway | None = None
    try:
        # Its call makes the channel try to connect; it cannot, so within seconds its
        # type is paused (issue 42, point 7) and nothing is charged.
        during = (await service.stub.Enqueue(card_request("during", "Some text."))).job.id
        pause = await wait_paused(service, within=10)
        assert "cannot connect to" in pause.last_error
        assert held, "the channel tried to connect during the outage"
        black_hole.close()  # the gateway is back; the attempts made meanwhile stay hung
        back = ScriptedGateway()
        server, _ = await start_scripted_gateway(back, address)
        after = await run_card(service, "after")
    finally:
        black_hole.close()
        for writer in held:
            writer.close()
        await server.stop(None)
    assert after.status == pb.JOB_STATUS_COMPLETED, [
        (a.error_code, a.error_message) for a in after.attempts
    ]
    assert after.attempt_count == 1
    assert back is not None and back.calls[after.id] == 1
    # The job of the outage ran once the gateway was back, charged nothing for it.
    ended = (await wait_terminal(service.stub, [during], timeout=20))[during]
    assert ended.status == pb.JOB_STATUS_COMPLETED
    assert [a.error_code for a in ended.attempts] == [""]


async def wait_paused(service: Service, within: float) -> pb.DispatchPause:
    """The pause of CARD_ANALYSIS, once GetJobStats shows it."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        stats = await service.stub.GetJobStats(pb.GetJobStatsRequest())
        for pause in stats.paused:
            if pause.job_type == pb.JOB_TYPE_CARD_ANALYSIS:
                return pause
        assert asyncio.get_running_loop().time() < deadline, "no pause shown"
        await asyncio.sleep(0.1)
