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

BIN = Path(sys.executable).parent
LISTENING = re.compile(r"listening on (?:https?://)?(\S+:\d+)")


@dataclass
class RunningService:
    """A service process and where it listens."""

    name: str
    proc: subprocess.Popen[bytes]
    address: str
    log_path: Path
    argv: list[str] = field(default_factory=list)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

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
            self.proc.kill()
            self.proc.wait(10)


def start_service(
    name: str,
    argv: list[str],
    log_dir: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> RunningService:
    """Start `argv` (argv[0] is a console script of this venv) and wait for its
    "listening on" line."""
    log_dir.mkdir(parents=True, exist_ok=True)
    index = len(list(log_dir.glob(f"{name}*.log")))
    log_path = log_dir / f"{name}-{index}.log"
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    command = [str(BIN / argv[0]), *argv[1:]]
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=full_env)
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
    """A real `job-service` on a free port; a SQLite file in `log_dir` by default."""
    url = database_url or f"sqlite+aiosqlite:///{log_dir / 'jobs.db'}"
    argv = ["job-service", "--listen", "127.0.0.1:0", "--database-url", url, "--gateway", gateway]
    return start_service("job-service", [*argv, *args], log_dir, env)


@contextmanager
def running(service: RunningService) -> Iterator[RunningService]:
    """Stop the service (SIGTERM, then kill) when the block ends, however it ends."""
    try:
        yield service
    finally:
        try:
            service.stop()
        except AssertionError:
            service.kill()
