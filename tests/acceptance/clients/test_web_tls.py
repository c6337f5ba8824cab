"""san-web as a real process over HTTPS, its TLS and token link to JobService, the
certificate re-read on SIGHUP, and the refusal to listen beyond loopback unprotected."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from _certs import write_test_certs
from _fake_job_service import Served, serve
from conftest import start_web

from tests.support.processes import RunningService, running

pytestmark = pytest.mark.acceptance

SAN_WEB = [sys.executable, "-m", "san_jobs.web"]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_test_certs(tmp_path_factory.mktemp("certs"))


def https_flags(certs: Path) -> list[str]:
    return ["--tls-cert", str(certs / "san-web.pem"), "--tls-key", str(certs / "san-web-key.pem")]


def trusting(ca: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca))


def served_certificate(address: str) -> bytes:
    """The DER certificate san-web presents to a new connection now."""
    host, port = address.rsplit(":", 1)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # only looking at which certificate is served
    with context.wrap_socket(socket.create_connection((host, int(port)))) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def test_https_with_the_ca_works_and_plaintext_fails(tmp_path: Path, certs: Path) -> None:
    with running(start_web(tmp_path, "127.0.0.1:1", *https_flags(certs))) as web:
        assert "https://" in web.log()
        answer = httpx.get(f"https://{web.address}/healthz", verify=trusting(certs / "ca.pem"))
        assert answer.status_code == 200
        assert answer.json()["status"] == "ok"
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://{web.address}/healthz")
        with pytest.raises(httpx.ConnectError):  # a CA that did not sign it
            httpx.get(f"https://{web.address}/healthz", verify=trusting(certs / "other-ca.pem"))


def test_client_certificates_required_with_tls_client_ca(tmp_path: Path, certs: Path) -> None:
    flags = [*https_flags(certs), "--tls-client-ca", str(certs / "ca.pem")]
    with running(start_web(tmp_path, "127.0.0.1:1", *flags)) as web:
        url = f"https://{web.address}/healthz"
        with pytest.raises(httpx.TransportError):
            httpx.get(url, verify=trusting(certs / "ca.pem"))
        with_cert = trusting(certs / "ca.pem")
        with_cert.load_cert_chain(certs / "operator.pem", certs / "operator-key.pem")
        assert httpx.get(url, verify=with_cert).status_code == 200


@pytest.fixture(params=["tls", "mutual-tls"])
def tls_job_service(request: pytest.FixtureRequest, certs: Path) -> Iterator[Served]:
    with serve(certs, mutual=request.param == "mutual-tls") as served:
        yield served


def test_calls_job_service_over_tls_with_its_token(
    tmp_path: Path, certs: Path, tls_job_service: Served
) -> None:
    token_file = tmp_path / "san-web.token"
    token_file.write_text("operator-secret-token\n")
    token_file.chmod(0o600)
    link = ["--job-service-tls-ca", str(certs / "ca.pem")]
    link += ["--job-service-tls-cert", str(certs / "san-web.pem")]
    link += ["--job-service-tls-key", str(certs / "san-web-key.pem")]
    link += ["--job-service-token-file", str(token_file)]
    with running(start_web(tmp_path, tls_job_service.address, *link)) as web:
        job_id = str(uuid.uuid4())
        answer = httpx.get(f"http://{web.address}/api/async-jobs/{job_id}")
        assert answer.status_code == 200, answer.text
        assert answer.json()["jobId"] == job_id
    assert tls_job_service.service.seen_tokens == ["operator-secret-token"]


def test_certificate_is_reloaded_on_sighup(tmp_path: Path, certs: Path) -> None:
    serving = tmp_path / "serving"
    serving.mkdir()
    for name in ("san-web.pem", "san-web-key.pem"):
        shutil.copy(certs / name, serving / name)
    with running(start_web(tmp_path, "127.0.0.1:1", *https_flags(serving))) as web:
        first = served_certificate(web.address)
        renewed = write_test_certs(tmp_path / "renewed")
        (serving / "san-web-key.pem").write_bytes((renewed / "san-web-key.pem").read_bytes())
        (serving / "san-web.pem").write_bytes((renewed / "san-web.pem").read_bytes())
        web.proc.send_signal(signal.SIGHUP)
        renewed_der = ssl.PEM_cert_to_DER_cert((renewed / "san-web.pem").read_text())
        assert _eventually_served(web, renewed_der), web.log()
        assert renewed_der != first
        # Still serving, with the new certificate, to a client trusting the new CA.
        answer = httpx.get(f"https://{web.address}/healthz", verify=trusting(renewed / "ca.pem"))
        assert answer.status_code == 200


def _eventually_served(web: RunningService, der: bytes) -> bool:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if served_certificate(web.address) == der:
            return True
        time.sleep(0.05)
    return False


def test_refuses_to_listen_beyond_loopback_unprotected(tmp_path: Path) -> None:
    database = f"sqlite+aiosqlite:///{tmp_path / 'web.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAN_WEB_")}
    result = subprocess.run(
        [*SAN_WEB, "--listen", "0.0.0.0:0", "--database-url", database],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("san-web: error: refusing to listen on 0.0.0.0:0"), lines
    assert "TLS" in lines[0] and "--insecure" in lines[0]


def test_insecure_listens_beyond_loopback(tmp_path: Path) -> None:
    database = f"sqlite+aiosqlite:///{tmp_path / 'web.db'}"
    web = start_web(
        tmp_path, "127.0.0.1:1", "--listen", "0.0.0.0:0", "--insecure", database_url=database
    )
    with running(web):
        port = web.address.rsplit(":", 1)[1]
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
