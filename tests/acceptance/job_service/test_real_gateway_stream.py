"""JobService against the real AiGateway over StreamCalls (issue 12, "missing tests"):
a per-call deadline, RetryInfo from the real rate limiter, a cancelled call, and a
quiet stream under short keepalive settings.

Both servers run in this process on loopback ports, each the real server (the
gateway's StreamCalls transport, limits, fault injection and call records;
JobService's worker, storage on SQLite and gateway stream): in-process because two
of these tests must change a channel option, and one must know when the gateway is
working on a call. Only that test swaps the gateway's backend (HangingBackend).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest

from san_jobs.ai_gateway import server as gateway_server
from san_jobs.ai_gateway.servicer import AiGatewayServicer
from san_jobs.job_service import gateway_client
from san_jobs.job_service.server import JobServiceRuntime, prepare_database
from san_jobs.job_service.settings import JobServiceSettings
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from tests.support.gateway_in_process import (
    HangingBackend,
    InProcessGateway,
    call_records,
    gateway_in_process,
    until,
    wait_for,
)
from tests.support.jobs_api import SAMPLE_TEXT, card_request, wait_terminal

pytestmark = pytest.mark.acceptance

Stub = pb_grpc.JobServiceStub


@asynccontextmanager
async def running_job_service(
    tmp_path: Path, gateway: InProcessGateway, **settings: Any
) -> AsyncIterator[Stub]:
    """The real JobService (SQLite in `tmp_path`) calling `gateway`; a stub to it."""
    # The settings ignore unknown names: one misspelt here would test the defaults.
    unknown = set(settings) - set(JobServiceSettings.model_fields)
    assert not unknown, f"not JobService settings: {unknown}"
    config = JobServiceSettings(
        listen="127.0.0.1:0",
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'jobs.db'}",
        gateway=gateway.address,
        poll_interval=0.2,
        grace=0.5,
        **settings,
    )
    await prepare_database(config)
    runtime = JobServiceRuntime(config)
    await runtime.start()
    try:
        async with grpc.aio.insecure_channel(runtime.address) as channel:
            yield pb_grpc.JobServiceStub(channel)
    finally:
        await runtime.stop()


@pytest.fixture
def streams_opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The peer of every StreamCalls stream the gateway opens from now on."""
    opened: list[str] = []
    serve = AiGatewayServicer.StreamCalls

    async def counted(self: AiGatewayServicer, requests: Any, context: Any) -> None:
        opened.append(context.peer())
        await serve(self, requests, context)

    monkeypatch.setattr(AiGatewayServicer, "StreamCalls", counted)
    return opened


def til_request(target_id: str) -> pb.EnqueueRequest:
    return pb.EnqueueRequest(
        job_type=pb.JOB_TYPE_TIL_GENERATION,
        target_id=target_id,
        til_generation_input=pb.TilGenerationInput(
            day="2026-03-01", notes=["Leases expire.", "Claims use SKIP LOCKED."]
        ),
    )


def records_of(gateway: InProcessGateway, job_id: str) -> list[tuple[int, str]]:
    """(attempt, status) of each gateway call recorded for `job_id`."""
    return [(r["attempt"], r["code"]) for r in call_records(gateway) if r["job_id"] == job_id]


async def test_each_call_keeps_its_own_deadline_on_the_shared_stream(
    tmp_path: Path, streams_opened: list[str]
) -> None:
    # Every call takes 1.5 s (injected latency). The card analysis may take 0.5 s, the
    # TIL 10 s: on one stream, the first times out and the second completes.
    async with (
        gateway_in_process(tmp_path, fault_latency=1.5) as gateway,
        running_job_service(
            tmp_path,
            gateway,
            deadline_for={"CARD_ANALYSIS": 0.5, "TIL_GENERATION": 10.0},
            max_attempts=1,
        ) as stub,
    ):
        card, til = await asyncio.gather(
            stub.Enqueue(card_request("slow-card", SAMPLE_TEXT), timeout=10),
            stub.Enqueue(til_request("slow-til"), timeout=10),
        )
        final = await wait_terminal(stub, [card.job.id, til.job.id], timeout=20)
        # The gateway's own record of the card call: it ends when the gateway's
        # deadline passes or JobService's cancel arrives, whichever is first.
        await until(lambda: records_of(gateway, card.job.id), "the card call's record")
    timed_out, completed = final[card.job.id], final[til.job.id]
    assert timed_out.status == pb.JOB_STATUS_FAILED
    assert timed_out.error_code == "DEADLINE_EXCEEDED"
    assert timed_out.error_message.startswith("Timeout:"), timed_out.error_message
    assert [(a.attempt, a.error_code) for a in timed_out.attempts] == [(1, "DEADLINE_EXCEEDED")]
    assert timed_out.attempts[0].error_message == timed_out.error_message
    assert completed.status == pb.JOB_STATUS_COMPLETED
    assert completed.til_generation_result.body
    [(attempt, code)] = records_of(gateway, card.job.id)
    assert attempt == 1 and code in {"DEADLINE_EXCEEDED", "CANCELLED"}
    assert records_of(gateway, til.job.id) == [(1, "OK")]
    assert len(streams_opened) == 1, "both calls travel on one stream"


async def test_retry_info_from_the_rate_limiter_is_honoured(
    tmp_path: Path, streams_opened: list[str]
) -> None:
    # One call per 2 s. JobService's own backoff would retry after 25-50 ms: only
    # the gateway's RetryInfo can make it wait the rest of the 2 s.
    seconds_per_call = 2.0
    async with (
        gateway_in_process(tmp_path, rate_limit=1 / seconds_per_call, burst=1) as gateway,
        running_job_service(
            tmp_path, gateway, retry_base_delay=0.05, retry_max_delay=10.0, max_attempts=3
        ) as stub,
    ):
        first = (await stub.Enqueue(card_request("rate-1", SAMPLE_TEXT), timeout=10)).job.id
        first_job = (await wait_terminal(stub, [first], timeout=20))[first]
        # The bucket is empty now: the next call is refused with RetryInfo.
        second = (await stub.Enqueue(card_request("rate-2", SAMPLE_TEXT), timeout=10)).job.id
        job = (await wait_terminal(stub, [second], timeout=20))[second]
    assert first_job.status == pb.JOB_STATUS_COMPLETED
    assert job.status == pb.JOB_STATUS_COMPLETED, job.error_message
    refused, retried = job.attempts
    assert (refused.error_code, refused.error_reason) == ("RESOURCE_EXHAUSTED", "RATE_LIMITED")
    assert retried.error_code == ""
    # The first job's call took the token at or after its attempt started, and the
    # bucket refills one token per 2 s: the RetryInfo pointed at that refill, so a
    # retry that honours it starts no earlier.
    token_taken_after = first_job.attempts[0].start_time.ToDatetime()
    waited = retried.start_time.ToDatetime() - token_taken_after
    assert waited >= timedelta(seconds=seconds_per_call), waited
    assert records_of(gateway, second) == [(1, "RESOURCE_EXHAUSTED"), (2, "OK")]
    assert len(streams_opened) == 1


async def test_cancel_job_cancels_the_call_the_gateway_is_working_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="job_service.worker")
    backend = HangingBackend()
    async with (
        gateway_in_process(tmp_path, backend) as gateway,
        running_job_service(tmp_path, gateway) as stub,
    ):
        job_id = (await stub.Enqueue(card_request("cancel-me", SAMPLE_TEXT), timeout=10)).job.id
        await wait_for(backend.arrived, "the call reaching the gateway's backend")
        await stub.CancelJob(pb.CancelJobRequest(job_id=job_id, reason="not needed"), timeout=10)
        await wait_for(backend.cancelled, "the gateway cancelling its work")
        await until(lambda: records_of(gateway, job_id), "the cancelled call's record")
        job = (await stub.GetJob(pb.GetJobRequest(job_id=job_id), timeout=10)).job
    assert records_of(gateway, job_id) == [(1, "CANCELLED")]
    assert backend.calls == 1
    assert job.status == pb.JOB_STATUS_CANCELLED
    assert job.cancel_reason == "not needed"
    assert job.attempt_count == 1
    assert f"job_id={job_id}: gateway call stopped, the job was cancelled" in caplog.text


# The keepalive options of both ends, 30 times shorter: JobService pings every 1 s
# (gRPC's floor between pings anyway) and the gateway accepts a ping every 333 ms.
# Ack timeouts are not what this test is about: at least 2 s on a busy machine.
KEEPALIVE_SCALE = 30
KEEPALIVE_PERIOD = 30.0 / KEEPALIVE_SCALE
SCALED_KEYS = {
    "grpc.keepalive_time_ms",
    "grpc.http2.min_ping_interval_without_data_ms",
}


def scaled_keepalive(options: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    scaled: list[tuple[str, Any]] = []
    for key, value in options:
        if key in SCALED_KEYS:
            value = value // KEEPALIVE_SCALE
        elif key == "grpc.keepalive_timeout_ms":
            value = max(value // KEEPALIVE_SCALE, 2_000)
        scaled.append((key, value))
    return scaled


async def test_a_quiet_stream_survives_short_keepalive_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, streams_opened: list[str]
) -> None:
    client = dict(gateway_client.CHANNEL_OPTIONS)
    server = dict(gateway_server.SERVER_OPTIONS)
    # The test scales the real values: it breaks if they are no longer where it looks.
    assert client["grpc.keepalive_time_ms"] == KEEPALIVE_PERIOD * KEEPALIVE_SCALE * 1000
    assert "grpc.http2.min_ping_interval_without_data_ms" in server
    monkeypatch.setattr(
        gateway_client,
        "CHANNEL_OPTIONS",
        scaled_keepalive(gateway_client.CHANNEL_OPTIONS),
    )
    monkeypatch.setattr(
        gateway_server, "SERVER_OPTIONS", scaled_keepalive(gateway_server.SERVER_OPTIONS)
    )
    async with (
        gateway_in_process(tmp_path) as gateway,
        running_job_service(tmp_path, gateway) as stub,
    ):
        before = (await stub.Enqueue(card_request("ka-1", SAMPLE_TEXT), timeout=10)).job.id
        assert (await wait_terminal(stub, [before], timeout=20))[before].attempt_count == 1
        # The stream is open and carries nothing for 3.5 keepalive periods: pings
        # only. (This wait is the condition under test, not a synchronisation.)
        await asyncio.sleep(3.5 * KEEPALIVE_PERIOD)
        after = (await stub.Enqueue(card_request("ka-2", SAMPLE_TEXT), timeout=10)).job.id
        job = (await wait_terminal(stub, [after], timeout=20))[after]
    assert job.status == pb.JOB_STATUS_COMPLETED, job.error_message
    assert [(a.attempt, a.error_code) for a in job.attempts] == [(1, "")], job.attempts
    assert records_of(gateway, after) == [(1, "OK")]
    assert len(streams_opened) == 1, "the second job went on the stream that had been quiet"
