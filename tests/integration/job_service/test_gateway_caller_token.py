"""JobService authenticates itself to an AiGateway that knows its callers by token
(issue 10, point 7): --gateway-token-file is sent as a bearer token on every call,
StreamCalls and unary; without it the gateway refuses the calls."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import grpc
import pytest

from san_jobs.ai_gateway.server import GatewayServer
from san_jobs.ai_gateway.settings import GatewaySettings
from san_jobs.job_service.domain.failures import GatewayCallError
from san_jobs.job_service.domain.model import Job, JobStatus, JobType
from san_jobs.job_service.gateway_client import GrpcAiGateway
from san_jobs.job_service.settings import JobServiceSettings
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from tests.support.jobs_api import SAMPLE_TEXT, card_request, wait_terminal
from tests.support.processes import RunningService, running, start_gateway, start_job_service

TOKEN = "jobs-" + "t" * 40


def write_files(folder: Path) -> tuple[Path, Path]:
    """The gateway's --caller-tokens-file (listing job-service) and job-service's
    --gateway-token-file (its token)."""
    folder.mkdir(parents=True, exist_ok=True)
    callers = folder / "callers"
    callers.write_text(f"# NAME TOKEN\njob-service {TOKEN}\nsan-web {'w' * 40}\n")
    token_file = folder / "gateway.token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    return callers, token_file


def start_pair(
    folder: Path, database_url: str, *job_service_args: str
) -> tuple[RunningService, RunningService]:
    """A real ai-gateway that requires caller tokens, and a real job-service on it."""
    callers, _ = write_files(folder)
    gateway = start_gateway(
        folder,
        "--backend",
        "instant",
        "--caller-tokens-file",
        str(callers),
        "--call-log",
        str(folder / "calls.jsonl"),
    )
    try:
        jobs = start_job_service(
            folder,
            "--max-attempts",
            "1",
            *job_service_args,
            gateway=gateway.address,
            database_url=database_url,
        )
    except BaseException:
        gateway.stop()
        raise
    return gateway, jobs


async def run_one_job(jobs: RunningService, target: str) -> pb.Job:
    async with grpc.aio.insecure_channel(jobs.address) as channel:
        stub = pb_grpc.JobServiceStub(channel)
        job_id = (await stub.Enqueue(card_request(target, SAMPLE_TEXT), timeout=10)).job.id
        return (await wait_terminal(stub, [job_id], timeout=60))[job_id]


@pytest.mark.acceptance
async def test_job_service_with_its_token_completes_a_job(
    tmp_path: Path, database_url: str
) -> None:
    _, token_file = write_files(tmp_path)
    gateway, jobs = await asyncio.to_thread(
        start_pair, tmp_path, database_url, "--gateway-token-file", str(token_file)
    )
    with running(gateway), running(jobs):
        job = await run_one_job(jobs, "with-token")
    assert job.status == pb.JOB_STATUS_COMPLETED, (job.error_message, jobs.log())
    records = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert [(r["job_id"], r["caller"], r["code"]) for r in records] == [
        (job.id, "job-service", "OK")
    ]
    assert TOKEN not in jobs.log() + gateway.log()


@pytest.mark.acceptance
async def test_job_service_without_a_token_is_refused_by_the_gateway(
    tmp_path: Path, database_url: str
) -> None:
    gateway, jobs = await asyncio.to_thread(start_pair, tmp_path, database_url)
    with running(gateway), running(jobs):
        job = await run_one_job(jobs, "without-token")
    assert job.status == pb.JOB_STATUS_FAILED
    # The shared stream was refused: not this job's fault, so UNAVAILABLE (retried).
    # (Its text names UNAUTHENTICATED when the refusal arrives before the first
    # write fails; grpc may report that write's failure instead.)
    assert job.error_message.startswith("AI gateway unavailable: ")
    assert (tmp_path / "calls.jsonl").read_text() == ""  # the gateway ran no call


def test_a_bad_gateway_token_file_is_a_settings_error(tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "spaced").write_text("two words\n")
    for name in ("empty", "spaced", "missing"):
        with pytest.raises(ValueError, match="token file"):
            JobServiceSettings(gateway_token_file=tmp_path / name)
    assert JobServiceSettings(gateway_token_file=write_files(tmp_path)[1]).gateway_token() == TOKEN


async def test_unary_gateway_calls_carry_the_token(tmp_path: Path) -> None:
    callers, _ = write_files(tmp_path)
    server = GatewayServer(
        GatewaySettings(listen="127.0.0.1:0", backend="instant", caller_tokens_file=callers)
    )
    port = await server.start()
    now = datetime.now(UTC)
    job = Job(
        id="00000000-0000-4000-8000-000000000001",
        job_type=JobType.CARD_ANALYSIS,
        status=JobStatus.PROCESSING,
        target_id="unary",
        request_params={"text": SAMPLE_TEXT},
        requested_by="",
        request_id=None,
        result=None,
        error_message=None,
        error_code=None,
        error_reason=None,
        attempt_count=1,
        max_attempts=1,
        created_at=now,
        updated_at=now,
        started_at=now,
        completed_at=None,
        failed_at=None,
        cancelled_at=None,
        cancel_reason=None,
        next_attempt_at=None,
        lease_expires_at=None,
        claim_token=None,
    )
    with_token = GrpcAiGateway(f"127.0.0.1:{port}", token=TOKEN)
    without_token = GrpcAiGateway(f"127.0.0.1:{port}")
    try:
        assert (await with_token.run(job, 5.0)).result["summary"]
        with pytest.raises(GatewayCallError) as caught:
            await without_token.run(job, 5.0)
        assert (caught.value.code, caught.value.reason) == ("UNAUTHENTICATED", "UNAUTHENTICATED")
    finally:
        await with_token.close()
        await without_token.close()
        await server.stop(0)
