"""Start the real services as subprocesses on free loopback ports, for tests.

Each service is started with `--listen 127.0.0.1:0`; the port it really bound is
read from its "listening on HOST:PORT" line. Output goes to a log file beside the
test's tmp_path so a failing test can show it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.databases import put_migrated_sqlite_file
from tests.support.program_forks import FORKED_COMMANDS, ForkedProcess, forks_enabled, start_forked

BIN = Path(sys.executable).parent
LISTENING = re.compile(r"listening on (?:https?://)?(\S+:\d+)")


@dataclass
class RunningService:
    """A service process and where it listens."""

    name: str
    proc: subprocess.Popen[bytes] | ForkedProcess
    address: str
    log_path: Path
    argv: list[str] = field(default_factory=list)
    # Set by kill(): the test ended the process on purpose, so its exit status says
    # nothing about how it shuts down.
    killed: bool = False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_tail(self, lines: int = 40) -> str:
        """The last `lines` lines of its output (stderr and stdout), for failure messages."""
        return "\n".join(self.log().splitlines()[-lines:])

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Send `sig` and wait for the exit; kill -9 if it outlives `timeout`."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise AssertionError(
                    f"{self.name} did not stop within {timeout}s:\n{self.log()}"
                ) from None
        return self.proc.returncode

    def kill(self) -> None:
        """kill -9: no cleanup at all, as when a machine dies."""
        if self.proc.poll() is None:
            self.killed = True
            self.proc.kill()
            self.proc.wait(10)

    def shutdown_problem(self, timeout: float = 30.0, expected_exit: int = 0) -> str | None:
        """Stop it as its operator would (SIGTERM, unless it has exited already) and
        say what went wrong: it outlived `timeout` (then it is killed), or it exited
        with another status than `expected_exit`. None when all went well, or when
        the test killed it on purpose."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                return (
                    f"{self.name} did not exit within {timeout:g}s of SIGTERM; "
                    f"the end of its output:\n{self.log_tail()}"
                )
        if self.killed or self.proc.returncode == expected_exit:
            return None
        return (
            f"{self.name} exited with status {self.proc.returncode}, not {expected_exit}; "
            f"the end of its output:\n{self.log_tail()}"
        )


def start_service(
    name: str,
    argv: list[str],
    log_dir: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> RunningService:
    """Start `argv` (argv[0] is a console script of this venv) and wait for its
    "listening on" line. The project's servers are forks of a process that imported
    them already (tests/support/program_forks.py says why)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    index = len(list(log_dir.glob(f"{name}*.log")))
    log_path = log_dir / f"{name}-{index}.log"
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    command = [str(BIN / argv[0]), *argv[1:]]
    proc: subprocess.Popen[bytes] | ForkedProcess
    if argv[0] in FORKED_COMMANDS and forks_enabled():
        log_path.write_bytes(b"")
        proc = start_forked(Path(command[0]), command[1:], full_env, log_path)
    else:
        with log_path.open("wb") as log_file:
            proc = subprocess.Popen(
                command, stdout=log_file, stderr=subprocess.STDOUT, env=full_env
            )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log_path.read_text(errors="replace")
        match = LISTENING.search(text)
        if match:
            return RunningService(name, proc, match.group(1), log_path, command)
        if proc.poll() is not None:
            raise AssertionError(f"{name} exited with {proc.returncode} before listening:\n{text}")
        time.sleep(0.05)
    proc.kill()
    proc.wait(10)
    raise AssertionError(f"{name} did not listen within {timeout}s:\n{log_path.read_text()}")


def start_gateway(
    log_dir: Path, *args: str, env: Mapping[str, str] | None = None
) -> RunningService:
    """A real `ai-gateway` on a free port (local backend unless args say otherwise)."""
    return start_service(
        "ai-gateway", ["ai-gateway", "--listen", "127.0.0.1:0", *args], log_dir, env
    )


def start_job_service(
    log_dir: Path,
    *args: str,
    gateway: str,
    database_url: str | None = None,
    env: Mapping[str, str] | None = None,
) -> RunningService:
    """A real `job-service` on a free port; by default on a SQLite file in `log_dir`,
    migrated already when the test has not made it (a copy of a migrated one)."""
    if database_url is None:
        path = log_dir / "jobs.db"
        if not path.exists():
            put_migrated_sqlite_file(path)
        database_url = f"sqlite+aiosqlite:///{path}"
    url = database_url
    argv = ["job-service", "--listen", "127.0.0.1:0", "--database-url", url, "--gateway", gateway]
    return start_service("job-service", [*argv, *args], log_dir, env)


@contextmanager
def running(
    service: RunningService, timeout: float = 30.0, expected_exit: int = 0
) -> Iterator[RunningService]:
    """Stop the service (SIGTERM) when the block ends, however it ends. A clean stop
    is part of the test: a service that does not exit within `timeout`, or exits with
    another status than `expected_exit` (it crashed, or its shutdown failed), fails
    it, with the end of its output. If the block failed already, that failure stands,
    with the shutdown's problem added as a note."""
    try:
        yield service
    except BaseException as failure:
        problem = service.shutdown_problem(timeout, expected_exit)
        if problem is not None:
            failure.add_note(problem)
        raise
    problem = service.shutdown_problem(timeout, expected_exit)
    if problem is not None:
        raise AssertionError(problem)


def stop_all(*services: RunningService, timeout: float = 30.0, expected_exit: int = 0) -> None:
    """Stop each service (SIGTERM) as `running` does, for code that stops services in
    a `finally` or a fixture's teardown: every one is stopped, then the test fails if
    any shut down badly. If an exception is already on its way, it stands, and the
    shutdown problems are added to it as notes."""
    problems = [
        problem
        for service in services
        if (problem := service.shutdown_problem(timeout, expected_exit)) is not None
    ]
    if not problems:
        return
    on_its_way = sys.exc_info()[1]
    if on_its_way is not None:
        for problem in problems:
            on_its_way.add_note(problem)
        return
    raise AssertionError("\n\n".join(problems))
