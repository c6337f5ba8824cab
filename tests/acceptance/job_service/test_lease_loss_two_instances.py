"""A worker loses its lease in the middle of a gateway call (issue 12, "missing
tests"): two real job-service processes on one PostgreSQL database.

Instance A claims the job; its call reaches A's gateway and hangs there (the real
gateway in this process, with a backend that never answers and tells the test when a
call arrives and when it is cancelled). A is then paused with SIGSTOP: it cannot
renew its lease, and nothing else can end its call. Instance B (its own real
ai-gateway process, instant answers) re-claims the job once A's lease has expired and
completes it. A is resumed with SIGCONT: its lease renewal, overdue, finds the job no
longer its own and cancels the call; the gateway's backend sees the cancellation.
Every step waits for an event (the call arriving, B's COMPLETED on its update stream,
the cancellation), none for a time; the only clock at work is A's lease, which is
what the test is about.

PostgreSQL only: a process paused inside a SQLite write transaction would hold the
file's lock, and B could claim nothing until A resumed, which it never would.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from tests.support.gateway_in_process import (
    HangingBackend,
    call_records,
    gateway_in_process,
    until,
    wait_for,
)
from tests.support.jobs_api import SAMPLE_TEXT, card_request, channel, wait_terminal
from tests.support.processes import RunningService, running, start_gateway, start_job_service

pytestmark = [pytest.mark.acceptance, pytest.mark.postgres]

LEASE_A = "1.5"  # seconds: A renews every 0.5 s while it runs


async def started(
    stack: AsyncExitStack, start: Callable[..., RunningService], *args: Any, **kwargs: Any
) -> RunningService:
    """`start(*args, **kwargs)` on a thread (it waits for the process to listen, and
    the gateway in this process must keep serving meanwhile); stopped with `stack`."""
    service = await asyncio.to_thread(start, *args, **kwargs)
    return stack.enter_context(running(service))


@contextmanager
def paused(service: RunningService) -> Iterator[None]:
    """SIGSTOP now; SIGCONT at the end of the block, however it ends (a stopped
    process would not act on the SIGTERM of its cleanup)."""
    service.proc.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        service.proc.send_signal(signal.SIGCONT)


def calls_of(call_log: Path, job_id: str) -> list[tuple[int, str]]:
    """(attempt, status) of each call an ai-gateway process recorded for `job_id`."""
    records = [json.loads(line) for line in call_log.read_text().splitlines()]
    return [(r["attempt"], r["code"]) for r in records if r["job_id"] == job_id]


async def test_a_paused_owner_loses_the_job_and_its_gateway_call_is_cancelled(
    tmp_path: Path, postgres_database: str
) -> None:
    backend = HangingBackend()
    b_calls = tmp_path / "gateway-b-calls.jsonl"
    async with AsyncExitStack() as stack:
        gateway_a = await stack.enter_async_context(
            gateway_in_process(tmp_path / "gateway-a", backend)
        )
        gateway_b = await started(
            stack,
            start_gateway,
            tmp_path / "gateway-b", "--backend", "instant", "--call-log", str(b_calls),
        )  # fmt: skip
        a = await started(
            stack,
            start_job_service,
            tmp_path / "a", "--instance-id", "a", "--workers", "1", "--lease", LEASE_A,
            gateway=gateway_a.address,
            database_url=postgres_database,
        )  # fmt: skip
        stub_a = pb_grpc.JobServiceStub(await stack.enter_async_context(channel(a.address)))
        request = card_request("lease-loss", SAMPLE_TEXT)
        job_id = (await stub_a.Enqueue(request, timeout=10)).job.id
        await wait_for(backend.arrived, "A's call reaching its gateway")
        # B starts now, while A renews its lease: B cannot claim the job yet.
        b = await started(
            stack,
            start_job_service,
            tmp_path / "b", "--instance-id", "b", "--poll-interval", "0.2",
            gateway=gateway_b.address,
            database_url=postgres_database,
        )  # fmt: skip
        stub_b = pb_grpc.JobServiceStub(await stack.enter_async_context(channel(b.address)))
        with paused(a):  # A's lease expires; B claims the job and completes it
            completed = (await wait_terminal(stub_b, [job_id], timeout=20))[job_id]
        # A runs again, its call still hanging at its gateway.
        await wait_for(backend.cancelled, "A's gateway call cancelled")
        await until(lambda: call_records(gateway_a), "the cancelled call's record")
        assert await asyncio.to_thread(a.stop) == 0, a.log()
        # A has exited: whatever it would write about the job is written by now.
        final = (await stub_b.GetJob(pb.GetJobRequest(job_id=job_id), timeout=10)).job
        assert await asyncio.to_thread(b.stop) == 0, b.log()

    # B's result stands, A's lost attempt is in the history, and A wrote nothing.
    assert completed.status == pb.JOB_STATUS_COMPLETED
    assert completed.card_analysis_result.model == "instant"  # B's gateway answered
    assert [(x.attempt, x.error_code) for x in completed.attempts] == [
        (1, "LEASE_EXPIRED"),
        (2, ""),
    ]
    assert final == completed
    # The gateways: A's call cancelled (never answered), B's answered.
    assert backend.calls == 1
    assert [(r["job_id"], r["attempt"], r["code"]) for r in call_records(gateway_a)] == [
        (job_id, 1, "CANCELLED")
    ]
    assert calls_of(b_calls, job_id) == [(2, "OK")]
    assert f"job_id={job_id}: lease lost; stopping its gateway call" in a.log()
    # A's log says why it stopped the call, and not that the job was cancelled.
    assert f"job_id={job_id}: gateway call stopped, the job is no longer ours" in a.log()
    assert "the job was cancelled" not in a.log()
    assert f"job_id={job_id} completed" not in a.log()
    assert f"job_id={job_id} completed" in b.log()
