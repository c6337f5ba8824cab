"""Claim limits played with real processes (issue 13, point 6): used by
tests/acceptance/job_service/test_claim_limits.py (scaled down) and by
bench/bench_outage.py (full size).

A real ai-gateway (instant answers, a call log) and `instances` job-services on one
database; `jobs` CARD_ANALYSIS jobs are enqueued at once (spread over the instances)
and run to the end. The figures: when each job started (its attempt's start time, set
by the claim just before the gateway call), the most starts in any one-second
window, and how many calls the gateway recorded.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from tests.support.jobs_api import SAMPLE_TEXT, card_request, channel, enqueue_cards, wait_terminal
from tests.support.processes import running, start_gateway, start_job_service


@dataclass(frozen=True)
class LimitFigures:
    jobs: int
    completed: int
    # Seconds since the first start, of every attempt's start, sorted.
    starts: tuple[float, ...]
    gateway_calls: int
    elapsed_seconds: float
    # Each attempt's (start, end), seconds since the first start.
    spans: tuple[tuple[float, float], ...] = ()

    @property
    def max_per_second(self) -> int:
        """The most starts in any one-second window [t, t + 1)."""
        starts, most, first = self.starts, 0, 0
        for last, moment in enumerate(starts):
            while moment - starts[first] >= 1.0:
                first += 1
            most = max(most, last - first + 1)
        return most

    @property
    def max_running(self) -> int:
        """The most attempts running at once (an end frees its slot before a start
        at the same moment takes it)."""
        events = sorted([(end, -1) for _, end in self.spans] + [(s, 1) for s, _ in self.spans])
        running = most = 0
        for _, change in events:
            running += change
            most = max(most, running)
        return most

    @property
    def start_span_seconds(self) -> float:
        """From the first start to the last."""
        return self.starts[-1] - self.starts[0] if self.starts else 0.0


async def run_limited(
    workdir: Path,
    *,
    jobs: int,
    job_service_args: Sequence[str],
    database_url: str | None,
    instances: int = 1,
    gateway_args: Sequence[str] = (),
    finish_timeout: float = 120.0,
) -> LimitFigures:
    call_log = workdir / "calls.jsonl"
    async with AsyncExitStack() as stack:
        gateway = await asyncio.to_thread(
            start_gateway,
            workdir / "gateway",
            "--backend", "instant", "--call-log", str(call_log), *gateway_args,
        )  # fmt: skip
        stack.enter_context(running(gateway))
        services = []
        for i in range(instances):
            service = await asyncio.to_thread(
                start_job_service,
                workdir / f"job-service-{i}",
                "--instance-id", f"js-{i}", *job_service_args,
                gateway=gateway.address,
                database_url=database_url,
            )  # fmt: skip
            services.append(stack.enter_context(running(service)))
        stubs = [
            pb_grpc.JobServiceStub(await stack.enter_async_context(channel(s.address)))
            for s in services
        ]
        loop = asyncio.get_running_loop()
        began = loop.time()
        per_stub = -(-jobs // len(stubs))
        batches = await asyncio.gather(
            *(
                enqueue_cards(stub, min(per_stub, jobs - n * per_stub), f"limited-{n}")
                for n, stub in enumerate(stubs)
            )
        )
        ids = [job_id for batch in batches for job_id in batch]
        final = await wait_terminal(stubs[0], ids, timeout=finish_timeout)
        elapsed = loop.time() - began

    done = list(final.values())
    attempts = [a for j in done for a in j.attempts]
    moments = sorted(a.start_time.ToDatetime(tzinfo=UTC).timestamp() for a in attempts)
    spans = tuple(
        (
            a.start_time.ToDatetime(tzinfo=UTC).timestamp() - moments[0],
            a.end_time.ToDatetime(tzinfo=UTC).timestamp() - moments[0],
        )
        for a in attempts
        if a.HasField("end_time")
    )
    calls = [json.loads(line) for line in call_log.read_text().splitlines()]
    return LimitFigures(
        jobs=len(done),
        completed=sum(j.status == pb.JOB_STATUS_COMPLETED for j in done),
        starts=tuple(m - moments[0] for m in moments),
        gateway_calls=sum(1 for c in calls if c.get("job_id")),
        elapsed_seconds=elapsed,
        spans=spans,
    )


@dataclass(frozen=True)
class FairShareFigures:
    big_jobs: int
    small_jobs: int
    small_completed: int
    # From the small caller's first Enqueue to its last job's completion.
    small_seconds: float
    # The big caller's jobs not yet finished when the small caller's all were.
    big_left: int


async def _enqueue_as(
    stub: pb_grpc.JobServiceStub, caller: str, count: int, concurrency: int = 32
) -> list[str]:
    semaphore = asyncio.Semaphore(concurrency)

    async def one(index: int) -> str:
        async with semaphore:
            request = card_request(f"{caller}-{index}", SAMPLE_TEXT, requested_by=caller)
            return str((await stub.Enqueue(request, timeout=30)).job.id)

    return list(await asyncio.gather(*(one(i) for i in range(count))))


async def run_fair_share(
    workdir: Path,
    *,
    big_jobs: int,
    small_jobs: int,
    job_service_args: Sequence[str],
    gateway_args: Sequence[str] = (),
    database_url: str | None = None,
    finish_timeout: float = 60.0,
) -> FairShareFigures:
    """One job-service; caller "big" enqueues `big_jobs`, then, once they are all in,
    caller "small" enqueues `small_jobs`; timed until small's are all finished."""
    async with AsyncExitStack() as stack:
        gateway = await asyncio.to_thread(
            start_gateway, workdir / "gateway", "--backend", "instant", *gateway_args
        )
        stack.enter_context(running(gateway))
        service = await asyncio.to_thread(
            start_job_service,
            workdir / "job-service",
            *job_service_args,
            gateway=gateway.address,
            database_url=database_url,
        )
        stack.enter_context(running(service))
        stub = pb_grpc.JobServiceStub(await stack.enter_async_context(channel(service.address)))
        await _enqueue_as(stub, "big", big_jobs)
        loop = asyncio.get_running_loop()
        began = loop.time()
        small = await _enqueue_as(stub, "small", small_jobs)
        final = await wait_terminal(stub, small, timeout=finish_timeout)
        small_seconds = loop.time() - began
        # Every small job is finished: the active jobs left are big's.
        stats = await stub.GetJobStats(pb.GetJobStatsRequest(), timeout=30)
        active = (pb.JOB_STATUS_PENDING, pb.JOB_STATUS_PROCESSING)
        left = sum(c.count for c in stats.counts if c.status in active)
    return FairShareFigures(
        big_jobs=big_jobs,
        small_jobs=small_jobs,
        small_completed=sum(j.status == pb.JOB_STATUS_COMPLETED for j in final.values()),
        small_seconds=small_seconds,
        big_left=left,
    )
