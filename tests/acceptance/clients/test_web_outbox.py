"""The goals of the transactional hand-off (issue 11), with real processes: san-web saves
a scrap and its job request in one transaction and its outbox relay delivers the request,
so JobService being down, san-web dying, or a late answer neither loses nor doubles a job.

Jobs are counted at JobService itself (ListJobs per target) and, where a proxy stands in
between, every Enqueue delivery is counted on its way there.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from _grpc_proxy import CountingProxy
from conftest import _stop, start_web

from san_jobs.client import Job, JobsClient, JobStatus
from tests.support.databases import create_temp_postgres_database, drop_database, require_postgres
from tests.support.processes import RunningService, start_gateway, start_job_service

pytestmark = pytest.mark.acceptance

TEXT = "An outbox row is committed with the scrap. The relay delivers it with its own id."
# The relay of these san-webs retries at least every half second, and gives up on a
# JobService call after 1 s (the late-answer goal waits for that deadline).
FAST_RELAY = ["--outbox-poll-interval", "0.2", "--outbox-max-backoff", "0.5"]


def _free_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def _job_service(
    folder: Path, gateway: RunningService, listen: str = "127.0.0.1:0"
) -> RunningService:
    return start_job_service(
        folder, "--listen", listen, "--poll-interval", "0.2", "--grace", "1",
        gateway=gateway.address,
    )  # fmt: skip


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[RunningService]:
    service = start_gateway(tmp_path)
    yield service
    _stop(service)


def post_scraps(base: str, count: int) -> list[str]:
    """``count`` scraps, posted 8 at a time; each must be answered 202 at once."""

    async def post_all() -> list[str]:
        limit = asyncio.Semaphore(8)
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:

            async def post(index: int) -> str:
                async with limit:
                    answer = await client.post("/api/scraps", json={"text": f"{TEXT} #{index}"})
                assert answer.status_code == 202, answer.text
                return str(answer.json()["scrapId"])

            return list(await asyncio.gather(*(post(i) for i in range(count))))

    return asyncio.run(post_all())


def jobs_by_target(job_service: str) -> dict[str, list[Job]]:
    """Every job JobService holds, by target (a scrap id)."""
    found: dict[str, list[Job]] = {}
    with JobsClient(job_service) as client:
        token = ""
        while True:
            page = client.list_jobs(page_size=1000, page_token=token)
            for job in page.jobs:
                found.setdefault(job.target_id, []).append(job)
            token = page.next_page_token
            if not token:
                return found


def wait_for_jobs(
    job_service: str, scrap_ids: list[str], *, completed: bool = False, patience: float = 60
) -> dict[str, list[Job]]:
    """JobService's jobs once every scrap has one (and, if asked, all are COMPLETED)."""
    deadline = time.monotonic() + patience
    while True:
        jobs = jobs_by_target(job_service)
        ready = all(scrap in jobs for scrap in scrap_ids)
        if ready and completed:
            ready = all(
                job.status == JobStatus.JOB_STATUS_COMPLETED for s in scrap_ids for job in jobs[s]
            )
        if ready or time.monotonic() > deadline:
            return jobs
        time.sleep(0.1)


def assert_one_job_each(base: str, jobs: dict[str, list[Job]], scrap_ids: list[str]) -> None:
    """Each scrap has exactly one job at JobService, and san-web shows that job."""
    counts = {scrap: len(jobs.get(scrap, [])) for scrap in scrap_ids}
    assert set(counts.values()) == {1}, {s: n for s, n in counts.items() if n != 1}
    with httpx.Client(base_url=base, timeout=30) as client:
        for scrap in scrap_ids:
            deadline = time.monotonic() + 30
            while (shown := client.get(f"/api/scraps/{scrap}").json())["jobId"] is None:
                assert time.monotonic() < deadline, shown
                time.sleep(0.05)
            assert shown["jobId"] == jobs[scrap][0].id and shown["state"] == "delivered"


def test_scraps_posted_while_job_service_is_down_each_get_one_job_when_it_returns(
    tmp_path: Path, gateway: RunningService
) -> None:
    address = _free_address()  # JobService will listen here, later
    web = start_web(tmp_path, address, *FAST_RELAY)
    try:
        base = f"http://{web.address}"
        scrap_ids = post_scraps(base, 20)
        first = httpx.get(f"{base}/api/scraps/{scrap_ids[0]}").json()
        assert first["jobId"] is None and first["state"] == "queued"

        started_at = datetime.now(UTC)
        job_service = _job_service(tmp_path, gateway, address)
        back_at = datetime.now(UTC)  # its "listening on" line has been printed
        try:
            jobs = wait_for_jobs(address, scrap_ids, completed=True)
            assert_one_job_each(base, jobs, scrap_ids)
            assert all(jobs[s][0].status == JobStatus.JOB_STATUS_COMPLETED for s in scrap_ids)
            last_created = max(jobs[s][0].create_time.ToDatetime(UTC) for s in scrap_ids)
            took = (last_created - back_at).total_seconds()
            print(
                f"JobService listening -> last of 20 jobs created: {took:.2f} s "
                f"(process start took {(back_at - started_at).total_seconds():.2f} s)"
            )
            assert took < 5.0
        finally:
            _stop(job_service)
    finally:
        _stop(web)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def web_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """san-web's own database, on SQLite or PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'san-web-outbox.db'}"
        return
    reason = require_postgres()
    if reason is not None:
        pytest.skip(reason)
    url = create_temp_postgres_database(migrated=False)
    try:
        yield url
    finally:
        drop_database(url)


def test_san_web_killed_while_rows_wait_delivers_each_once_after_restart(
    tmp_path: Path, gateway: RunningService, web_database: str
) -> None:
    address = _free_address()
    # A 2 s deadline gives 4 s leases: a row the killed relay held is free again then.
    relay = [*FAST_RELAY, "--job-service-timeout", "2"]
    web = start_web(tmp_path, address, *relay, database_url=web_database)
    scrap_ids = post_scraps(f"http://{web.address}", 10)
    web.kill()  # kill -9: no shutdown, the relay's rows stay queued

    job_service = _job_service(tmp_path, gateway, address)
    try:
        assert jobs_by_target(address) == {}  # nothing was delivered before the crash
        restarted_at = time.monotonic()
        web = start_web(tmp_path, address, *relay, database_url=web_database)
        try:
            jobs = wait_for_jobs(address, scrap_ids)
            print(f"san-web restarted -> 10 jobs: {time.monotonic() - restarted_at:.2f} s")
            assert_one_job_each(f"http://{web.address}", jobs, scrap_ids)
        finally:
            _stop(web)
    finally:
        _stop(job_service)


def test_a_late_answer_after_commit_still_makes_one_job_per_scrap(
    tmp_path: Path, gateway: RunningService
) -> None:
    job_service = _job_service(tmp_path, gateway)
    proxy = CountingProxy(job_service.address, late_answers=True)
    web = start_web(
        tmp_path, proxy.address, *FAST_RELAY, "--job-service-timeout", "1", database_url=None
    )
    try:
        base = f"http://{web.address}"
        scrap_ids = post_scraps(base, 5)
        jobs = wait_for_jobs(job_service.address, scrap_ids)
        assert_one_job_each(base, jobs, scrap_ids)
        deliveries = proxy.deliveries()
        # Each request went out at least twice: once answered too late, then again,
        # answered with the job JobService had already committed.
        assert len(deliveries) == 5 and min(deliveries.values()) >= 2, deliveries
        print(f"Enqueue deliveries per scrap with late answers: {sorted(deliveries.values())}")
    finally:
        _stop(web)
        proxy.close()
        _stop(job_service)


@pytest.mark.postgres
def test_two_san_webs_on_one_postgres_deliver_500_scraps_once_each(
    tmp_path: Path, gateway: RunningService
) -> None:
    reason = require_postgres()
    if reason is not None:
        pytest.skip(reason)
    database = create_temp_postgres_database(migrated=False)
    job_service = _job_service(tmp_path, gateway)
    proxy = CountingProxy(job_service.address)
    webs: list[RunningService] = []
    try:
        # One after the other: the first creates san-web's tables.
        for _ in range(2):
            webs.append(start_web(tmp_path, proxy.address, *FAST_RELAY, database_url=database))
        bases = [f"http://{web.address}" for web in webs]
        scrap_ids = post_scraps(bases[0], 250) + post_scraps(bases[1], 250)
        jobs = wait_for_jobs(job_service.address, scrap_ids)
        assert len(jobs) == 500
        assert_one_job_each(bases[1], jobs, scrap_ids)
        deliveries = proxy.deliveries()
        assert len(deliveries) == 500
        duplicates = {request: n for request, n in deliveries.items() if n > 1}
        assert duplicates == {}
        # Per target, deliveries arrive in the order they were added (one each here).
        targets = [seen.target_id for seen in proxy.seen]
        assert sorted(targets) == sorted(scrap_ids)
        print(f"500 scraps via two san-webs: {sum(deliveries.values())} Enqueue deliveries")
    finally:
        for web in webs:
            _stop(web)
        proxy.close()
        _stop(job_service)
        drop_database(database)
