"""jobsctl as a subprocess over real TLS and mutual TLS, with tokens: what works, and
the one-line error (and exit code) of each way it can fail.

The server is a small JobService in this process (``_fake_job_service``) on a real
loopback port with real certificates, so that each failure is made on purpose."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from _certs import write_test_certs
from _fake_job_service import Served, serve

pytestmark = pytest.mark.acceptance

JOBSCTL = str(Path(sys.executable).parent / "jobsctl")
JOB_ID = str(uuid.uuid4())


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_test_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_server(certs: Path) -> Iterator[Served]:
    with serve(certs) as served:
        yield served


@pytest.fixture(scope="module")
def mtls_server(certs: Path) -> Iterator[Served]:
    with serve(certs, mutual=True) as served:
        yield served


@pytest.fixture(scope="module")
def plain_server() -> Iterator[Served]:
    with serve(None) as served:
        yield served


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("operator-secret-token\n")  # as `echo TOKEN > FILE` leaves it
    path.chmod(0o600)
    return path


def jobsctl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SAN_JOBSCTL_")}
    return subprocess.run(
        [JOBSCTL, *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env={**clean, **(env or {})},
    )


def one_line_error(result: subprocess.CompletedProcess[str], code: int) -> str:
    """The failure is one `jobsctl: error:` line on stderr (no gRPC log, no traceback)."""
    assert result.returncode == code, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("jobsctl: error: "), lines
    return lines[0]


def test_tls_ca_and_token_file_reach_the_server(
    tls_server: Served, certs: Path, token_file: Path
) -> None:
    result = jobsctl(
        "--target", tls_server.address, "--tls-ca", str(certs / "ca.pem"),
        "--token-file", str(token_file), "get", JOB_ID, "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert JOB_ID in result.stdout
    assert result.stderr == ""  # a 0600 token file: no warning
    assert tls_server.service.seen_tokens[-1] == "operator-secret-token"  # newline stripped


def test_settings_from_the_environment(tls_server: Served, certs: Path, token_file: Path) -> None:
    env = {
        "SAN_JOBSCTL_TARGET": tls_server.address,
        "SAN_JOBSCTL_TLS_CA": str(certs / "ca.pem"),
        "SAN_JOBSCTL_TOKEN_FILE": str(token_file),
    }
    result = jobsctl("cancel", JOB_ID, env=env)
    assert result.returncode == 0, result.stderr
    assert f"cancelled {JOB_ID}" in result.stdout


def test_no_token_is_not_authenticated(tls_server: Served, certs: Path) -> None:
    result = jobsctl(
        "--target", tls_server.address, "--tls-ca", str(certs / "ca.pem"), "get", JOB_ID
    )  # fmt: skip
    line = one_line_error(result, 7)
    assert line.startswith("jobsctl: error: not authenticated: missing or bad token")
    assert "--token-file" in line


def test_a_role_without_the_right_is_permission_denied(tls_server: Served, certs: Path) -> None:
    result = jobsctl(
        "--target", tls_server.address, "--tls-ca", str(certs / "ca.pem"),
        "cancel", JOB_ID, env={"SAN_JOBSCTL_TOKEN": "viewer-secret-token"},
    )  # fmt: skip
    line = one_line_error(result, 8)
    assert line.startswith("jobsctl: error: permission denied: role viewer may not call CancelJob")


def test_a_server_signed_by_another_ca_is_refused(tls_server: Served, certs: Path) -> None:
    result = jobsctl(
        "--target", tls_server.address, "--tls-ca", str(certs / "other-ca.pem"), "get", JOB_ID
    )  # fmt: skip
    line = one_line_error(result, 5)
    assert "TLS handshake failed" in line and "--tls-ca" in line, line


def test_plaintext_to_a_tls_server_says_to_use_tls(tls_server: Served) -> None:
    line = one_line_error(jobsctl("--target", tls_server.address, "get", JOB_ID), 5)
    assert "closed the connection" in line and "--tls-ca" in line, line


def test_tls_to_a_plaintext_server_says_it_does_not_speak_tls(
    plain_server: Served, certs: Path
) -> None:
    result = jobsctl(
        "--target", plain_server.address, "--tls-ca", str(certs / "ca.pem"), "get", JOB_ID
    )  # fmt: skip
    line = one_line_error(result, 5)
    assert "does not speak TLS" in line, line


def test_mutual_tls_needs_a_client_certificate(
    mtls_server: Served, certs: Path, token_file: Path
) -> None:
    common = ["--target", mtls_server.address, "--tls-ca", str(certs / "ca.pem")]
    common += ["--token-file", str(token_file)]
    refused = jobsctl(*common, "get", JOB_ID)
    line = one_line_error(refused, 5)
    assert "--tls-cert and --tls-key" in line, line

    client_cert = ["--tls-cert", str(certs / "operator.pem")]
    client_cert += ["--tls-key", str(certs / "operator-key.pem")]
    accepted = jobsctl(*common, *client_cert, "get", JOB_ID)
    assert accepted.returncode == 0, accepted.stderr


def test_a_token_file_readable_by_others_is_used_with_a_warning(
    tls_server: Served, certs: Path, token_file: Path
) -> None:
    token_file.chmod(0o644)
    result = jobsctl(
        "--target", tls_server.address, "--tls-ca", str(certs / "ca.pem"),
        "--token-file", str(token_file), "get", JOB_ID,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("jobsctl: warning: token file ")
    assert "chmod 600" in result.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--tls-ca", "/nonexistent/ca.pem"], "cannot read --tls-ca /nonexistent/ca.pem"),
        (["--tls-cert", "CERTS/operator.pem"], "--tls-cert needs --tls-key"),
        (["--token-file", "/nonexistent/token"], "cannot read token file /nonexistent/token"),
        (["--token", "t", "--token-file", "TOKEN"], "--token and --token-file both give"),
        (["--tls-ca", "TOKEN"], "is not PEM"),
    ],
)
def test_unusable_settings_are_usage_errors(
    tls_server: Served, certs: Path, token_file: Path, args: list[str], expected: str
) -> None:
    args = [a.replace("CERTS", str(certs)).replace("TOKEN", str(token_file)) for a in args]
    line = one_line_error(jobsctl("--target", tls_server.address, *args, "get", JOB_ID), 2)
    assert expected in line, line
