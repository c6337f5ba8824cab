"""A gateway outage played with real processes (issue 13, point 5): used by
tests/acceptance/job_service/test_breaker_outage.py (scaled down) and by
bench/bench_outage.py (full size).

A real ai-gateway (instant answers) and a real job-service; jobs arrive at a steady
rate; at `outage_at` seconds the gateway process is killed (-9), and after
`outage_seconds` a new one is started on the same port. The figures come from the
jobs' own records (GetJob): how many ended FAILED, how many attempts were charged
with UNAVAILABLE (a job given back uncharged keeps no attempt record of it), and how
long after the gateway's return the last job completed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from tests.support.jobs_api import SAMPLE_TEXT, card_request, channel, wait_terminal
from tests.support.processes import RunningService, running, start_gateway, start_job_service

TRANSIENT = ("UNAVAILABLE", "DEADLINE_EXCEEDED")


@dataclass(frozen=True)
class OutageFigures:
    jobs: int
    failed: int
    completed: int
    charged_unavailable: int
    charged_transient: int
    # Last COMPLETED minus the gateway's return (seconds; None without an outage).
    recovery_seconds: float | None
    elapsed_seconds: float
    # Each job-service's output, by instance.
    logs: tuple[str, ...] = ()


def _stamp(ts: object) -> datetime:
    return ts.ToDatetime(tzinfo=UTC)  # type: ignore[attr-defined, no-any-return]


async def _started(stack: AsyncExitStack, service: RunningService) -> RunningService:
    return stack.enter_context(running(service))


async def run_outage(
    workdir: Path,
    *,
    jobs: int,
    rate: float,
    outage_at: float | None,
    outage_seconds: float,
    job_service_args: Sequence[str] = (),
    gateway_args: Sequence[str] = (),
    database_url: str | None = None,
    instances: int = 1,
    instance_args: Sequence[Sequence[str]] = (),
    finish_timeout: float = 120.0,
) -> OutageFigures:
    """Run the scenario; the figures. `outage_at` None: no outage at all."""
    async with AsyncExitStack() as stack:
        gateway = await asyncio.to_thread(
            start_gateway, workdir / "gateway-0", "--backend", "instant", *gateway_args
        )
        first_gateway = gateway
        stack.callback(lambda: first_gateway.proc.poll() is None and first_gateway.kill())
        services = []
        for i in range(instances):
            service = await asyncio.to_thread(
                start_job_service,
                workdir / f"job-service-{i}",
                "--instance-id", f"js-{i}", *job_service_args,
                *(instance_args[i] if i < len(instance_args) else ()),
                gateway=gateway.address,
                database_url=database_url,
            )  # fmt: skip
            services.append(await _started(stack, service))
        stubs = [
            pb_grpc.JobServiceStub(await stack.enter_async_context(channel(s.address)))
            for s in services
        ]
        loop = asyncio.get_running_loop()
        began = loop.time()
        returned_at: datetime | None = None

        async def outage() -> None:
            nonlocal returned_at
            if outage_at is None:
                return
            await asyncio.sleep(outage_at)
            first_gateway.kill()
            await asyncio.sleep(outage_seconds)
            back = await asyncio.to_thread(
                start_gateway,
                workdir / "gateway-1",
                "--backend", "instant", "--listen", first_gateway.address, *gateway_args,
            )  # fmt: skip
            returned_at = datetime.now(UTC)
            stack.enter_context(running(back))

        outage_task = asyncio.create_task(outage())
        ids: list[str] = []
        for n in range(jobs):
            await asyncio.sleep(max(0.0, began + n / rate - loop.time()))
            request = card_request(f"outage-{n}", SAMPLE_TEXT)
            ids.append((await stubs[n % len(stubs)].Enqueue(request, timeout=10)).job.id)
        await outage_task
        final = await wait_terminal(stubs[0], ids, timeout=finish_timeout)
        elapsed = loop.time() - began
        for service in services:
            assert await asyncio.to_thread(service.stop) == 0, service.log_tail()
        logs = tuple(service.log() for service in services)

    done = list(final.values())
    attempts = [a for job in done for a in job.attempts]
    completed_at = [_stamp(j.complete_time) for j in done if j.status == pb.JOB_STATUS_COMPLETED]
    recovery = None
    if returned_at is not None and completed_at:
        recovery = (max(completed_at) - returned_at).total_seconds()
    return OutageFigures(
        jobs=len(done),
        failed=sum(j.status == pb.JOB_STATUS_FAILED for j in done),
        completed=len(completed_at),
        charged_unavailable=sum(a.error_code == "UNAVAILABLE" for a in attempts),
        charged_transient=sum(a.error_code in TRANSIENT for a in attempts),
        recovery_seconds=recovery,
        elapsed_seconds=elapsed,
        logs=logs,
    )
