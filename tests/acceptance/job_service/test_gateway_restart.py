"""A gateway restart costs no attempt (issue 22, point 15), with real processes: the
real ai-gateway is killed (-9) and started again on the same port while a real
job-service (max_attempts 1) keeps its channel to it.

A call that never reached the gateway is not charged: it waits for the connection
within its deadline, so a job sent right after the restart, or claimed while the
gateway was down and back within the deadline, completes on its one attempt.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from tests.support.jobs_api import SAMPLE_TEXT, card_request, channel, wait_terminal
from tests.support.processes import RunningService, running, start_gateway, start_job_service

pytestmark = pytest.mark.acceptance

# Longer than the 5 s the old code waited for a connection before failing the call.
DOWN_SECONDS = 7.0
DEADLINE = 20.0


@dataclass
class Link:
    workdir: Path
    gateway: RunningService
    job_service: RunningService
    stub: pb_grpc.JobServiceStub

    def kill_gateway(self) -> None:
        self.gateway.kill()

    def restart_gateway(self, stack: AsyncExitStack) -> None:
        """A new gateway process on the address the killed one had."""
        self.gateway = start_gateway(
            self.workdir / "gateway-again", "--backend", "instant", "--listen", self.gateway.address
        )
        stack.enter_context(running(self.gateway))


@asynccontextmanager
async def linked(workdir: Path) -> AsyncIterator[tuple[Link, AsyncExitStack]]:
    """A gateway and a job-service calling it, one attempt per job; the first job run
    already, so the channel was connected when the gateway goes away."""
    async with AsyncExitStack() as stack:
        gateway = start_gateway(workdir / "gateway", "--backend", "instant")
        stack.callback(gateway.kill)  # the first one; a restarted one is `running`
        args = ("--max-attempts", "1", "--deadline", f"{DEADLINE:g}")
        job_service = start_job_service(workdir / "job-service", *args, gateway=gateway.address)
        stack.enter_context(running(job_service))
        stub = pb_grpc.JobServiceStub(await stack.enter_async_context(channel(job_service.address)))
        link = Link(workdir, gateway, job_service, stub)
        warm = await enqueue(link, "warm")
        assert (await wait_terminal(stub, [warm], 30))[warm].status == pb.JOB_STATUS_COMPLETED
        yield link, stack


async def enqueue(link: Link, target_id: str) -> str:
    request = card_request(target_id, SAMPLE_TEXT, max_attempts=1)
    return str((await link.stub.Enqueue(request, timeout=10)).job.id)


def assert_completed_on_its_one_attempt(job: pb.Job, link: Link) -> None:
    assert job.status == pb.JOB_STATUS_COMPLETED, (
        f"{pb.JobStatus.Name(job.status)}: {job.error_message}\n{link.job_service.log_tail()}"
    )
    assert job.attempt_count == 1
    assert [(a.attempt, a.error_code) for a in job.attempts] == [(1, "")]


async def test_a_job_sent_right_after_a_gateway_restart_completes_on_its_one_attempt(
    tmp_path: Path,
) -> None:
    async with linked(tmp_path) as (link, stack):
        link.kill_gateway()
        await asyncio.sleep(1.0)  # the channel sees the connection go and backs off
        await asyncio.to_thread(link.restart_gateway, stack)
        job_id = await enqueue(link, "right-after")
        job = (await wait_terminal(link.stub, [job_id], 30))[job_id]
    assert_completed_on_its_one_attempt(job, link)


async def test_a_job_claimed_while_the_gateway_is_down_completes_when_it_is_back(
    tmp_path: Path,
) -> None:
    async with linked(tmp_path) as (link, stack):
        link.kill_gateway()
        job_id = await enqueue(link, "while-down")
        # Claimed, its call waiting for a connection (the condition under test: a
        # gateway away longer than the old 5 s wait, shorter than the deadline).
        await asyncio.sleep(DOWN_SECONDS)
        waiting = (await link.stub.GetJob(pb.GetJobRequest(job_id=job_id), timeout=10)).job
        assert waiting.status == pb.JOB_STATUS_PROCESSING, waiting
        await asyncio.to_thread(link.restart_gateway, stack)
        job = (await wait_terminal(link.stub, [job_id], 30))[job_id]
    assert_completed_on_its_one_attempt(job, link)


async def test_an_unreachable_gateway_is_shown_paused_within_seconds_charging_nothing(
    tmp_path: Path,
) -> None:
    """Issue 42, point 7: the first pause came when a call's deadline (30 s by
    default) had passed, so `jobsctl stats` 25 s into an outage showed none. Now a
    call that cannot connect for gateway_client.UNREACHABLE_AFTER (3 s) opens it."""
    async with linked(tmp_path) as (link, stack):
        loop = asyncio.get_running_loop()
        link.kill_gateway()
        killed = loop.time()
        job_id = await enqueue(link, "while-down")
        pause = None
        while pause is None and loop.time() - killed < 10:
            await asyncio.sleep(0.2)
            stats = await link.stub.GetJobStats(pb.GetJobStatsRequest(), timeout=10)
            pause = next((p for p in stats.paused if p.job_type == pb.JOB_TYPE_CARD_ANALYSIS), None)
        shown_after = loop.time() - killed
        assert pause is not None, link.job_service.log_tail()
        assert shown_after < 5, shown_after
        assert pause.reason == pb.PAUSE_REASON_CIRCUIT_OPEN
        assert "cannot connect to" in pause.last_error, pause.last_error
        waiting = (await link.stub.GetJob(pb.GetJobRequest(job_id=job_id), timeout=10)).job
        assert waiting.status in (pb.JOB_STATUS_PROCESSING, pb.JOB_STATUS_PENDING)
        assert not [a for a in waiting.attempts if a.error_code], waiting.attempts

        await asyncio.to_thread(link.restart_gateway, stack)
        job = (await wait_terminal(link.stub, [job_id], 30))[job_id]
        assert_completed_on_its_one_attempt(job, link)
        stats = await link.stub.GetJobStats(pb.GetJobStatsRequest(), timeout=10)
        assert not stats.paused, stats.paused
