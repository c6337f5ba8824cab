"""jobsctl and the SDK against a real job-service process serving mutual TLS with
bearer tokens (``--tls-cert/--tls-key/--tls-client-ca --auth token``), tokens made
with ``job-service tokens create``: the whole client path, as an operator runs it."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from _certs import write_test_certs
from test_jobsctl_tls import jobsctl, one_line_error

from san_jobs.client import (
    AsyncJobsClient,
    CardAnalysisInput,
    PermissionDeniedError,
    UnauthenticatedError,
)
from tests.support.processes import BIN, RunningService, running, start_gateway, start_job_service

pytestmark = pytest.mark.acceptance


@dataclass
class SecureJobService:
    service: RunningService
    certs: Path
    tokens: dict[str, Path]  # role -> token file

    def flags(self, role: str | None = "operator", *, client_cert: bool = True) -> list[str]:
        flags = ["--target", self.service.address, "--tls-ca", str(self.certs / "ca.pem")]
        if client_cert:
            flags += ["--tls-cert", str(self.certs / "operator.pem")]
            flags += ["--tls-key", str(self.certs / "operator-key.pem")]
        if role is not None:
            flags += ["--token-file", str(self.tokens[role])]
        return flags


def _create_token(database_url: str, name: str, role: str, folder: Path) -> Path:
    made = subprocess.run(
        [str(BIN / "job-service"), "tokens", "create", name, "--role", role,
         "--database-url", database_url],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    path = folder / f"{name}.token"
    path.write_text(made.stdout)  # the token and its newline, as `> FILE` would keep it
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def secure_job_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureJobService]:
    folder = tmp_path_factory.mktemp("secure-job-service")
    folder.chmod(0o700)
    certs = write_test_certs(folder / "certs")
    database_url = f"sqlite+aiosqlite:///{folder / 'jobs.db'}"
    # `tokens create` migrates the database it is given, before job-service starts.
    tokens = {
        role: _create_token(database_url, f"{role}-1", role, folder)
        for role in ("operator", "viewer", "submitter")
    }
    tls = ["--tls-cert", str(certs / "job-service.pem")]
    tls += ["--tls-key", str(certs / "job-service-key.pem")]
    tls += ["--tls-client-ca", str(certs / "ca.pem"), "--auth", "token"]
    with running(start_gateway(folder)) as gateway:
        service = start_job_service(
            folder, *tls, gateway=gateway.address, database_url=database_url
        )
        with running(service):
            yield SecureJobService(service, certs, tokens)


def test_operator_enqueues_and_reads_over_mutual_tls(secure_job_service: SecureJobService) -> None:
    flags = secure_job_service.flags("operator")
    enqueued = jobsctl(*flags, "enqueue", "card-analysis", "--target-id", "tls-1", "--text", "Hi.")
    assert enqueued.returncode == 0, enqueued.stderr
    job_id = enqueued.stdout.strip()
    shown = jobsctl(*flags, "get", job_id, "--json")
    assert shown.returncode == 0, shown.stderr
    assert '"requestedBy": "operator-1"' in shown.stdout  # who the token says, not "jobsctl"


def test_no_token_exits_7(secure_job_service: SecureJobService) -> None:
    line = one_line_error(jobsctl(*secure_job_service.flags(None), "stats"), 7)
    assert line.startswith("jobsctl: error: not authenticated: "), line


def test_viewer_cannot_retry_exits_8(secure_job_service: SecureJobService) -> None:
    result = jobsctl(*secure_job_service.flags("viewer"), "retry-failed", "--all-failed")
    line = one_line_error(result, 8)
    assert line.startswith("jobsctl: error: permission denied: "), line


def test_without_a_client_certificate_the_handshake_is_refused(
    secure_job_service: SecureJobService,
) -> None:
    result = jobsctl(*secure_job_service.flags("operator", client_cert=False), "stats")
    line = one_line_error(result, 5)
    assert "--tls-cert and --tls-key" in line, line


async def test_async_sdk_over_mutual_tls_with_typed_errors(
    secure_job_service: SecureJobService,
) -> None:
    certs = secure_job_service.certs
    tls = {
        "tls_ca": certs / "ca.pem",
        "tls_cert": certs / "operator.pem",
        "tls_key": certs / "operator-key.pem",
    }
    token = secure_job_service.tokens["submitter"].read_text().strip()
    async with AsyncJobsClient(secure_job_service.service.address, token=token, **tls) as client:
        job = (await client.enqueue("tls-async-1", CardAnalysisInput(text="Hello."))).job
        assert job.requested_by == "submitter-1"
        with pytest.raises(PermissionDeniedError):
            await client.retry_failed(all_failed=True)
    async with AsyncJobsClient(secure_job_service.service.address, token="sjt_wrong", **tls) as bad:
        with pytest.raises(UnauthenticatedError):
            await bad.get_job(job.id)
