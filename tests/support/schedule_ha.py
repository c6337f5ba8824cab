"""The issue 25 goal for schedules, with real processes: a 1 s interval schedule on
three job-service instances sharing one PostgreSQL database, one of them killed -9
in the middle. Used by the acceptance test (a short run) and by
bench/bench_schedules.py (the full 30 s)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from google.protobuf.duration_pb2 import Duration

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from tests.support.jobs_api import card_request, channel, list_all
from tests.support.processes import RunningService, start_gateway, start_job_service, stop_all

SCHEDULE_ID = "ha-every-second"
PREFIX = f"schedule:{SCHEDULE_ID}:"


@dataclass
class HaRun:
    periods: list[datetime]  # each fired period's start, sorted (one per job)
    per_period: Counter[datetime]  # jobs per period
    missing: list[datetime]  # periods between the first and last with no job
    skipped_count: int
    killed: str  # the instance killed -9
    fired_by: Counter[str]  # instance id -> jobs its log says it enqueued
    late_seconds: list[float]  # per job: create_time - its period's start


async def run_ha(tmp_path: Path, database_url: str, seconds: float) -> HaRun:
    """Three instances; the schedule created on the first; the second killed -9
    half-way (half a second after a period started, so no job of it is in flight);
    after `seconds`, the schedule paused and the jobs read."""
    gateway = start_gateway(tmp_path)
    instances: list[RunningService] = []
    try:
        for name in ("a", "b", "c"):
            instances.append(
                start_job_service(
                    tmp_path,
                    "--instance-id",
                    name,
                    gateway=gateway.address,
                    database_url=database_url,
                )
            )
        async with channel(instances[0].address) as chan:
            stub = pb_grpc.JobServiceStub(chan)
            schedule = pb.Schedule(
                schedule_id=SCHEDULE_ID,
                interval=Duration(seconds=1),
                template=card_request("ha-target", "text to analyse"),
            )
            created = (
                await stub.CreateSchedule(pb.CreateScheduleRequest(schedule=schedule))
            ).schedule
            first = created.next_fire_time.ToDatetime().timestamp()
            started = time.time()
            # Half-way, half a second after a period's start: its job is done by then.
            kill_at = first + round(seconds / 2) + 0.5
            await asyncio.sleep(max(0.0, kill_at - time.time()))
            instances[1].kill()
            await asyncio.sleep(max(0.0, started + seconds - time.time()))
            paused = (
                await stub.PauseSchedule(pb.PauseScheduleRequest(schedule_id=SCHEDULE_ID))
            ).schedule
            await asyncio.sleep(0.5)  # a round in flight at the pause commits first
            jobs = [j for j in await list_all(stub) if j.request_id.startswith(PREFIX)]
    finally:
        stop_all(*instances, gateway)
    per_period: Counter[datetime] = Counter(
        datetime.fromisoformat(j.request_id.removeprefix(PREFIX)) for j in jobs
    )
    periods = sorted(per_period)
    missing: list[datetime] = []
    if periods:
        expected = int((periods[-1] - periods[0]).total_seconds()) + 1
        have = {p.timestamp() for p in periods}
        base = periods[0].timestamp()
        missing = [
            datetime.fromtimestamp(base + k, periods[0].tzinfo)
            for k in range(expected)
            if base + k not in have
        ]
    fired_by: Counter[str] = Counter()
    for service in instances:
        for line in service.log().splitlines():
            if f"enqueued by schedule {SCHEDULE_ID}" in line:
                name = service.argv[service.argv.index("--instance-id") + 1]
                fired_by[name] += 1
    late = [
        j.create_time.ToDatetime().timestamp()
        - datetime.fromisoformat(j.request_id.removeprefix(PREFIX)).timestamp()
        for j in jobs
    ]
    return HaRun(
        periods=periods,
        per_period=per_period,
        missing=missing,
        skipped_count=paused.skipped_count,
        killed="b",
        fired_by=fired_by,
        late_seconds=sorted(late),
    )
