"""The tests' forked programs (tests/support/program_forks.py) behave as the console
scripts do where the tests look: output, exit statuses, signals, environment and
working directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import start_gateway
from tests.support.program_forks import ForkedProcess, start_forked

BIN = Path(sys.executable).parent


def _forked(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[ForkedProcess, Path]:
    log_path = tmp_path / "out.log"
    log_path.write_bytes(b"")
    proc = start_forked(BIN / "job-service", list(args), env or dict(os.environ), log_path)
    return proc, log_path


def test_a_bad_flag_exits_and_says_so_as_the_console_script_does(tmp_path: Path) -> None:
    proc, log_path = _forked(tmp_path, "--workers", "0")
    assert proc.wait(30) == 2
    script = subprocess.run(
        [str(BIN / "job-service"), "--workers", "0"], capture_output=True, text=True, timeout=30
    )
    assert script.returncode == 2
    assert log_path.read_text() == script.stdout + script.stderr
    assert "--workers" in log_path.read_text()


def test_the_fork_takes_the_tests_environment_and_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A variable the settings read, set for the fork only.
    proc, log_path = _forked(tmp_path, env={**os.environ, "SAN_JOBS_WORKERS": "many"})
    assert proc.wait(30) == 2
    assert "SAN_JOBS_WORKERS: Input should be a valid integer" in log_path.read_text()
    assert "SAN_JOBS_WORKERS" not in os.environ
    # A relative database path, which only the test's working directory resolves.
    here = tmp_path / "here"
    here.mkdir(mode=0o700)
    monkeypatch.chdir(here)
    proc, log_path = _forked(tmp_path, "migrate", "--database-url", "sqlite+aiosqlite:///rel.db")
    assert proc.wait(60) == 0, log_path.read_text()
    assert (here / "rel.db").is_file()


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 0), (signal.SIGKILL, -9)])
def test_a_forked_server_is_its_own_process_that_signals_end(
    tmp_path: Path, sig: signal.Signals, status: int
) -> None:
    gateway = start_gateway(tmp_path)
    assert isinstance(gateway.proc, ForkedProcess)
    assert gateway.proc.pid != os.getpid()
    assert gateway.proc.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        gateway.proc.wait(0.1)
    gateway.proc.send_signal(sig)
    assert gateway.proc.wait(30) == status
    assert gateway.proc.returncode == status
    if sig == signal.SIGTERM:
        assert "ai-gateway stopped" in gateway.log()
