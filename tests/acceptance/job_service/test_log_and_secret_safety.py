"""Issue 9, points 11 and 12, on real job-service processes: a caller's text cannot
forge a log line or put control bytes in the log; a database password never shows in
what job-service prints; a password can come from a libpq password file instead of
the URL (so it need not sit in `ps` output or the environment)."""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import make_url

from san_jobs.client import CardAnalysisInput, InvalidRequestError, JobsClient
from tests.support.jobs_api import free_port
from tests.support.processes import running, start_job_service

pytestmark = pytest.mark.acceptance

JOB_SERVICE = str(Path(sys.executable).parent / "job-service")
PASSWORD = "S3cret@Pass"  # an unencoded "@" too: masking must not leave a tail behind
FORGED = "2026-01-01 00:00:00,000 INFO job-service[forged] job_service.app: FAKE LINE"


def test_caller_values_cannot_forge_a_log_line(tmp_path: Path) -> None:
    dead_gateway = f"127.0.0.1:{free_port()}"
    with running(
        start_job_service(
            tmp_path, "--retry-base-delay", "60", "--max-attempts", "5", gateway=dead_gateway
        )
    ) as service:
        client = JobsClient(service.address, timeout=10)
        try:
            text = CardAnalysisInput(text="A page about logs.")
            # Validation may refuse control characters in requested_by; if it takes
            # them, they must not reach the log raw.
            with contextlib.suppress(InvalidRequestError):
                client.enqueue("scrap-a", text, requested_by=f"x\n{FORGED}\x00")
            job = client.enqueue("scrap-b", text, requested_by="web").job
            client.cancel_job(job.id, reason=f"x\n{FORGED}\x1b[2J\x85\u2028\r")
        finally:
            client.close()
        service.stop()
        raw = service.log_path.read_bytes()
    log = raw.decode()
    for control in ("\x00", "\x1b", "\x85", "\u2028", "\r"):
        assert control not in log, f"{control!r} reached the log"
    assert not [line for line in log.splitlines() if line.startswith("2026-01-01")]
    assert f"cancelled: x\\n{FORGED}\\x1b[2J\\x85\\u2028\\r" in log


def _job_service(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # No PGPASSWORD from the caller's environment: it would win over a password file.
    base = {name: value for name, value in os.environ.items() if name != "PGPASSWORD"}
    return subprocess.run(
        [JOB_SERVICE, *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env={**base, **(env or {})},
    )


def _assert_no_password(output: str) -> None:
    for fragment in (PASSWORD, "S3cret", "Pass@"):
        assert fragment not in output, output


@pytest.mark.parametrize(
    "url",
    [
        # A driver job-service does not take: refused by the settings check.
        "postgresql://svc:{password}@127.0.0.1:{port}/jobs",
        # Nothing listens there.
        "postgresql+asyncpg://svc:{password}@127.0.0.1:{port}/jobs",
        # A URL the driver cannot parse.
        "postgresql+asyncpg://svc:{password}@127.0.0.1:notaport/jobs",
    ],
    ids=["wrong-driver", "unreachable", "bad-port"],
)
@pytest.mark.parametrize("given_as", ["flag", "env"])
def test_startup_errors_never_show_the_password(url: str, given_as: str) -> None:
    url = url.format(password=PASSWORD, port=free_port())
    args = ["--listen", "127.0.0.1:0"]
    if given_as == "flag":
        result = _job_service(*args, "--database-url", url)
    else:
        result = _job_service(*args, env={"SAN_JOBS_DATABASE_URL": url})
    assert result.returncode in (1, 2), result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("job-service: "), result.stderr
    assert "svc:***@" in lines[0]
    _assert_no_password(result.stdout + result.stderr)


def test_migrate_logs_the_url_without_its_password(postgres_database: str) -> None:
    # The test server trusts every local connection: any password gets in.
    url = make_url(postgres_database).set(password=PASSWORD).render_as_string(False)
    result = _job_service("migrate", "--database-url", url)
    assert result.returncode == 0, result.stderr
    assert ":***@" in result.stderr
    _assert_no_password(result.stdout + result.stderr)


class _PasswordCatcher:
    """A PostgreSQL server just far enough to ask for a cleartext password, note it,
    and refuse it: shows which password a client sent, from wherever it took it."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)  # to see `_stop` soon
        self.port = self.listener.getsockname()[1]
        self._stop = threading.Event()
        self.passwords: list[str] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.listener.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            with conn, contextlib.suppress(OSError, struct.error):
                self._one(conn)

    def _one(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        while True:  # SSLRequest (answered "no") until the startup message
            length, code = struct.unpack("!ii", _read(conn, 8))
            _read(conn, length - 8)
            if code != 80877103:
                break
            conn.sendall(b"N")
        conn.sendall(b"R" + struct.pack("!ii", 8, 3))  # AuthenticationCleartextPassword
        kind, length = struct.unpack("!ci", _read(conn, 5))
        assert kind == b"p"
        self.passwords.append(_read(conn, length - 4).rstrip(b"\0").decode())
        fields = b"SFATAL\0VFATAL\0C28P01\0Mpassword authentication failed\0\0"
        conn.sendall(b"E" + struct.pack("!i", len(fields) + 4) + fields)


def _read(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise OSError("closed")
        data += chunk
    return data


@pytest.fixture
def password_catcher() -> Iterator[_PasswordCatcher]:
    catcher = _PasswordCatcher()
    yield catcher
    catcher.close()


def test_the_password_can_come_from_a_pgpass_file(
    tmp_path: Path, password_catcher: _PasswordCatcher
) -> None:
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"127.0.0.1:{password_catcher.port}:jobs:svc:{PASSWORD}\n")
    passfile.chmod(0o600)  # libpq's rule, kept by asyncpg: a wider file is ignored
    url = f"postgresql+asyncpg://svc@127.0.0.1:{password_catcher.port}/jobs"
    result = _job_service("migrate", "--database-url", url, env={"PGPASSFILE": str(passfile)})
    assert result.returncode == 1
    assert "password authentication failed" in result.stderr
    assert password_catcher.passwords and set(password_catcher.passwords) == {PASSWORD}
    _assert_no_password(result.stdout + result.stderr)
