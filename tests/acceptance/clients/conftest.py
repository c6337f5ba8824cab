"""Real ai-gateway, job-service and san-web processes for the clients' acceptance tests.

Three stacks, started once per session and only when a test asks for them:
``ok_stack`` (the local backend), ``slow_stack`` (every gateway call takes 60 s, so jobs
stay active long enough to collide with) and ``failing_stack`` (the gateway always
answers UNAVAILABLE and job-service gives up after one attempt).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.processes import (
    BIN,
    RunningService,
    start_gateway,
    start_job_service,
    start_service,
    stop_all,
)
from tests.support.program_forks import run_forked


@dataclass
class Stack:
    gateway: RunningService
    job_service: RunningService
    log_dir: Path

    @property
    def address(self) -> str:
        return self.job_service.address


def _stop(*services: RunningService) -> None:
    # A failed or hung shutdown fails the test (tests.support.processes.stop_all).
    stop_all(*services)


def _stack(log_dir: Path, gateway_args: list[str], job_args: list[str]) -> Iterator[Stack]:
    gateway = start_gateway(log_dir, *gateway_args)
    try:
        # The default poll (1 s): every job these tests make wakes the worker itself,
        # and a stack lives the whole session, where a 0.2 s poll cost twice the idle
        # CPU (measured: 0.51 s against 0.25 s per 20 idle seconds).
        job_service = start_job_service(log_dir, *job_args, "--grace", "1", gateway=gateway.address)
    except BaseException:
        _stop(gateway)
        raise
    try:
        yield Stack(gateway, job_service, log_dir)
    finally:
        _stop(job_service, gateway)


@pytest.fixture(scope="session")
def ok_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from _stack(tmp_path_factory.mktemp("ok-stack"), [], [])


@pytest.fixture(scope="session")
def slow_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # 60 s: the jobs must stay active through several jobsctl runs on a loaded machine.
    yield from _stack(tmp_path_factory.mktemp("slow-stack"), ["--fault-latency", "60"], [])


@pytest.fixture(scope="session")
def failing_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from _stack(
        tmp_path_factory.mktemp("failing-stack"),
        ["--fault-unavailable-rate", "1.0"],
        # This stack shows how failed jobs look: its breaker never pauses the type
        # (a pause would keep the jobs PENDING, as it should in production).
        ["--max-attempts", "1", "--breaker-failures", "1000000"],
    )


@pytest.fixture(scope="session")
def dead_address() -> str:
    """HOST:PORT where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"127.0.0.1:{port}"


def start_web(
    log_dir: Path, job_service: str, *args: str, database_url: str | None = None
) -> RunningService:
    """A real san-web process; its scraps in a SQLite file in ``log_dir`` unless
    ``database_url`` says otherwise."""
    database = database_url or f"sqlite+aiosqlite:///{log_dir / 'san-web.db'}"
    return start_service(
        "san-web",
        [
            "san-web",
            "--listen",
            "127.0.0.1:0",
            "--job-service",
            job_service,
            "--database-url",
            database,
            *args,
        ],
        log_dir,
    )


def create_web_user(
    database_url: str, name: str, password: str
) -> subprocess.CompletedProcess[str]:
    """The real ``san-web users create NAME`` with the password on standard input."""
    return run_forked(
        BIN / "san-web", ["users", "create", name, "--database-url", database_url], input=password
    )


@pytest.fixture(scope="session")
def web_ok(ok_stack: Stack) -> Iterator[str]:
    web = start_web(ok_stack.log_dir, ok_stack.address)
    yield f"http://{web.address}"
    _stop(web)


@pytest.fixture(scope="session")
def web_slow(slow_stack: Stack) -> Iterator[str]:
    web = start_web(slow_stack.log_dir, slow_stack.address)
    yield f"http://{web.address}"
    _stop(web)


@pytest.fixture(scope="session")
def web_failing(failing_stack: Stack) -> Iterator[str]:
    web = start_web(failing_stack.log_dir, failing_stack.address)
    yield f"http://{web.address}"
    _stop(web)


@pytest.fixture(scope="session")
def web_down(tmp_path_factory: pytest.TempPathFactory, dead_address: str) -> Iterator[str]:
    web = start_web(tmp_path_factory.mktemp("web-down"), dead_address)
    yield f"http://{web.address}"
    _stop(web)


def scrap_job_id(client: httpx.Client | str, scrap_id: str, *, timeout: float = 30.0) -> str:
    """The job id of a scrap, once san-web's outbox has handed it to JobService
    (POST /api/scraps answers before that: its jobId may still be null)."""
    base = client if isinstance(client, str) else ""
    get = httpx.get if isinstance(client, str) else client.get
    deadline = time.monotonic() + timeout
    while True:
        body = get(f"{base}/api/scraps/{scrap_id}").json()
        if body["jobId"]:
            return str(body["jobId"])
        assert body["state"] != "refused", body
        assert time.monotonic() < deadline, f"scrap {scrap_id} still has no job: {body}"
        time.sleep(0.05)


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None
