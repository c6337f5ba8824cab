"""Issue 9, point 15: PostgreSQL stopped and started while Enqueues arrive.

Real processes (an ai-gateway and two job-service instances) on a private PostgreSQL
cluster of this test's own (the machine's main cluster serves other tests at the same
time), several clients enqueueing all along, and a real stop and start of the server.

What the callers may see, and what must hold afterwards:
- every Enqueue answers OK or UNAVAILABLE (retriable), never UNKNOWN or INTERNAL;
- every Enqueue answered OK is stored, with the id it was given; no Enqueue answered
  UNAVAILABLE is stored (a caller told "failed" must be able to send it again);
- after the restart new Enqueues succeed, every stored job completes, and nothing is
  left PENDING or PROCESSING.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import grpc
import pytest

from san_jobs.job_service.storage.notify import asyncpg_dsn
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from tests.support.ci import skip_or_fail_in_ci
from tests.support.jobs_api import SAMPLE_TEXT, card_request, channel
from tests.support.pg_cluster import (
    PrivateCluster,
    private_cluster,
    private_cluster_unavailable_reason,
)
from tests.support.processes import RunningService, running, start_gateway, start_job_service

pytestmark = [pytest.mark.acceptance, pytest.mark.postgres]

CLIENTS = 8
OKS_BEFORE_STOP = 100  # load is flowing on both instances
DOWN_SECONDS = 1.0  # the database is away this long
OKS_AFTER_START = 5  # per client, after the server is back


@pytest.fixture
def cluster() -> Iterator[PrivateCluster]:
    reason = private_cluster_unavailable_reason()
    if reason is not None:
        skip_or_fail_in_ci(reason)
    with private_cluster() as made:
        yield made


@dataclass(frozen=True)
class Answer:
    target_id: str
    code: str
    job_id: str
    details: str
    after_start: bool


class Load:
    """CLIENTS callers, each on its own channel, each enqueueing one job after
    another (a new target each time, no retries) until told to stop."""

    def __init__(self) -> None:
        self.answers: list[Answer] = []
        self.started_again = False
        self.stopping = asyncio.Event()

    def oks(self, *, after_start: bool) -> Counter[str]:
        return Counter(
            a.target_id.split("-")[0]
            for a in self.answers
            if a.code == "OK" and a.after_start == after_start
        )

    async def client(self, name: str, address: str) -> None:
        async with channel(address) as chan:
            stub = pb_grpc.JobServiceStub(chan)
            for number in range(1_000_000):
                if self.stopping.is_set():
                    return
                target = f"{name}-{number}"
                after_start = self.started_again
                request = card_request(target, f"{SAMPLE_TEXT} {target}.")
                try:
                    response = await stub.Enqueue(request, timeout=20)
                except grpc.aio.AioRpcError as error:
                    code = error.code().name
                    self.answers.append(
                        Answer(target, code, "", error.details() or "", after_start)
                    )
                    await asyncio.sleep(0.05)
                    continue
                self.answers.append(Answer(target, "OK", response.job.id, "", after_start))
                await asyncio.sleep(0.01)

    async def wait_for(self, enough: Callable[[], bool], within: float, what: str) -> None:
        deadline = time.monotonic() + within
        while not enough():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}: {self.summary()}")
            await asyncio.sleep(0.05)

    def summary(self) -> str:
        return str(Counter((a.code, a.after_start) for a in self.answers))


async def _stored_jobs(url: str) -> dict[str, tuple[str, str]]:
    """target_id -> (id, status), straight from the database."""
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        rows = await conn.fetch("SELECT target_id, id, status FROM async_jobs")
    finally:
        await conn.close()
    return {row["target_id"]: (row["id"], row["status"]) for row in rows}


async def _wait_all_terminal(url: str, within: float) -> dict[str, tuple[str, str]]:
    deadline = time.monotonic() + within
    while True:
        stored = await _stored_jobs(url)
        active = Counter(s for _, s in stored.values() if s in {"PENDING", "PROCESSING"})
        if not active:
            return stored
        if time.monotonic() > deadline:
            raise AssertionError(f"jobs still active after {within}s: {active}")
        await asyncio.sleep(0.2)


@pytest.mark.timeout(90)
async def test_enqueues_across_a_postgres_restart_get_ok_or_unavailable_and_mean_it(
    cluster: PrivateCluster, tmp_path: Path
) -> None:
    # A short lease: a claim whose answer the restart swallowed comes back quickly.
    instance_args = ("--lease", "3", "--workers", "20")
    with (
        running(start_gateway(tmp_path, "--backend", "instant")) as gateway,
        running(
            start_job_service(
                tmp_path, *instance_args, gateway=gateway.address, database_url=cluster.url
            )
        ) as first,
        running(
            start_job_service(
                tmp_path, *instance_args, gateway=gateway.address, database_url=cluster.url
            )
        ) as second,
    ):
        load = Load()
        clients = [
            asyncio.create_task(load.client(f"c{i}", (first, second)[i % 2].address))
            for i in range(CLIENTS)
        ]
        try:
            await load.wait_for(
                lambda: sum(load.oks(after_start=False).values()) >= OKS_BEFORE_STOP,
                20,
                "enqueues before the stop",
            )
            await asyncio.to_thread(cluster.stop)
            await asyncio.sleep(DOWN_SECONDS)
            await asyncio.to_thread(cluster.start)
            load.started_again = True
            await load.wait_for(
                lambda: all(
                    load.oks(after_start=True)[f"c{i}"] >= OKS_AFTER_START for i in range(CLIENTS)
                ),
                20,
                "enqueues after the start",
            )
        finally:
            load.stopping.set()
            await asyncio.gather(*clients, return_exceptions=True)

        codes = Counter(a.code for a in load.answers)
        odd = [a for a in load.answers if a.code not in {"OK", "UNAVAILABLE"}]
        assert not odd, f"{codes}; e.g. {odd[:3]}\n" + _logged_errors(odd, (first, second))
        assert codes["UNAVAILABLE"] >= 1, f"the outage was never seen: {codes}"

        stored = await _wait_all_terminal(cluster.url, 20)
        told_ok = {a.target_id: a.job_id for a in load.answers if a.code == "OK"}
        told_failed = {a.target_id for a in load.answers if a.code != "OK"}
        lost = {t: i for t, i in told_ok.items() if stored.get(t, ("", ""))[0] != i}
        assert not lost, f"answered OK but not stored: {sorted(lost)[:5]} of {len(lost)}"
        ghosts = told_failed & stored.keys()
        assert not ghosts, f"answered UNAVAILABLE but stored: {sorted(ghosts)[:5]}"
        assert stored.keys() <= told_ok.keys() | told_failed
        statuses = Counter(status for _, status in stored.values())
        assert statuses == {"COMPLETED": len(stored)}, statuses

    for instance in (first, second):
        log = instance.log()
        assert "InternalClientError" not in log
        assert "another operation" not in log


def _logged_errors(odd: list[Answer], instances: tuple[RunningService, ...]) -> str:
    """The log lines (with the traceback after them) of the odd answers' error ids."""
    shown: list[str] = []
    for answer in odd[:3]:
        error_id = answer.details.rpartition("error id ")[2].rstrip(")")
        for instance in instances:
            lines = instance.log().splitlines()
            for i, line in enumerate(lines):
                if error_id and error_id in line:
                    shown += lines[i : i + 40]
    return "\n".join(shown)
