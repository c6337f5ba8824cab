"""Issue 10, points 1-3: TLS on the services' links, secure by default beyond
loopback, certificate rotation on SIGHUP. Real job-service and ai-gateway
processes, real TLS on loopback ports, certificates from `scripts/dev_certs.py`."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from grpc_health.v1 import health_pb2, health_pb2_grpc

from san_jobs.proto.aigateway.v1 import ai_gateway_pb2, ai_gateway_pb2_grpc
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from scripts.dev_certs import write_dev_certs
from tests.support.jobs_api import enqueue_cards, wait_terminal
from tests.support.processes import (
    RunningService,
    running,
    start_gateway,
    start_job_service,
    start_service,
)

pytestmark = pytest.mark.acceptance

BIN = Path(sys.executable).parent
NO_GATEWAY = "127.0.0.1:9"  # nothing listens: these services never call it


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A development CA and certificates, as `make certs` writes them."""
    folder = tmp_path_factory.mktemp("certs")
    write_dev_certs(folder)
    return folder


def server_tls_args(certs: Path, name: str, *, mutual: bool) -> list[str]:
    args = ["--tls-cert", str(certs / f"{name}.pem"), "--tls-key", str(certs / f"{name}-key.pem")]
    return [*args, "--tls-client-ca", str(certs / "ca.pem")] if mutual else args


def client_credentials(certs: Path, client: str | None) -> grpc.ChannelCredentials:
    """Trust the dev CA; with `client`, present that part's certificate."""
    chain = (certs / f"{client}.pem").read_bytes() if client else None
    key = (certs / f"{client}-key.pem").read_bytes() if client else None
    return grpc.ssl_channel_credentials(
        (certs / "ca.pem").read_bytes(), private_key=key, certificate_chain=chain
    )


def health_status(channel: grpc.Channel) -> int:
    reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    return int(reply.status)


def refused(channel: grpc.Channel) -> grpc.StatusCode:
    """The code a health check gets on `channel`, which must fail."""
    with pytest.raises(grpc.RpcError) as caught:
        health_status(channel)
    code: grpc.StatusCode = caught.value.code()  # type: ignore[attr-defined]
    return code


def served_serial(address: str, certs: Path, client: str | None = None) -> int:
    """The serial number of the certificate a new TLS connection to `address` sees."""
    host, _, port = address.rpartition(":")
    context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    context.set_alpn_protocols(["h2"])
    if client:
        context.load_cert_chain(certs / f"{client}.pem", certs / f"{client}-key.pem")
    with (
        socket.create_connection((host.strip("[]"), int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as wrapped,
    ):
        der = wrapped.getpeercert(binary_form=True)
    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)


def serial_of(path: Path) -> int:
    return int(x509.load_pem_x509_certificate(path.read_bytes()).serial_number)


@pytest.fixture
def tls_job_service(certs: Path, tmp_path: Path) -> Iterator[RunningService]:
    """job-service serving TLS only (no client certificates asked for)."""
    args = server_tls_args(certs, "job-service", mutual=False)
    with running(start_job_service(tmp_path, *args, gateway=NO_GATEWAY)) as service:
        yield service


def test_a_plaintext_client_is_refused_by_a_tls_server(
    certs: Path, tls_job_service: RunningService
) -> None:
    with grpc.insecure_channel(tls_job_service.address) as plain:
        assert refused(plain) == grpc.StatusCode.UNAVAILABLE
    # Health stays reachable, over the same TLS port.
    credentials = client_credentials(certs, None)
    with grpc.secure_channel(tls_job_service.address, credentials) as secure:
        assert health_status(secure) == health_pb2.HealthCheckResponse.SERVING
    assert "(TLS, database" in tls_job_service.log()


def test_mutual_tls_refuses_a_client_without_a_certificate_and_serves_a_signed_one(
    certs: Path, tmp_path: Path
) -> None:
    args = server_tls_args(certs, "ai-gateway", mutual=True)
    with running(start_gateway(tmp_path, *args)) as gateway:
        with grpc.secure_channel(gateway.address, client_credentials(certs, None)) as anonymous:
            assert refused(anonymous) == grpc.StatusCode.UNAVAILABLE
        request = ai_gateway_pb2.AnalyzeContentRequest(text="Queues hold jobs. Workers run them.")
        # Signed by the CA but not JobService's (--tls-client-names' default): health
        # answers, the models do not.
        with grpc.secure_channel(gateway.address, client_credentials(certs, "operator")) as known:
            assert health_status(known) == health_pb2.HealthCheckResponse.SERVING
            with pytest.raises(grpc.RpcError) as caught:
                ai_gateway_pb2_grpc.AiGatewayServiceStub(known).AnalyzeContent(request, timeout=10)
            assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED  # type: ignore[attr-defined]
        with grpc.secure_channel(gateway.address, client_credentials(certs, "job-service")) as js:
            reply = ai_gateway_pb2_grpc.AiGatewayServiceStub(js).AnalyzeContent(request, timeout=10)
            assert reply.summary


@pytest.mark.parametrize("storage", ["sqlite", "postgres"])
async def test_job_service_calls_the_gateway_over_mutual_tls_end_to_end(
    certs: Path, tmp_path: Path, storage: str, request: pytest.FixtureRequest
) -> None:
    database_url = request.getfixturevalue("postgres_database") if storage == "postgres" else None
    gateway_args = server_tls_args(certs, "ai-gateway", mutual=True)
    with running(start_gateway(tmp_path, *gateway_args)) as gateway:
        service_args = [
            *server_tls_args(certs, "job-service", mutual=True),
            *("--gateway-tls-ca", str(certs / "ca.pem")),
            *("--gateway-tls-cert", str(certs / "job-service.pem")),
            *("--gateway-tls-key", str(certs / "job-service-key.pem")),
        ]
        service = start_job_service(
            tmp_path, *service_args, gateway=gateway.address, database_url=database_url
        )
        with running(service):
            credentials = client_credentials(certs, "operator")
            async with grpc.aio.secure_channel(service.address, credentials) as channel:
                stub = pb_grpc.JobServiceStub(channel)
                ids = await enqueue_cards(stub, 3, f"tls-{storage}")
                jobs = await wait_terminal(stub, ids, timeout=60)
        assert "mutual TLS, database" in service.log() and "over TLS" in service.log()
    assert {job.status for job in jobs.values()} == {pb.JOB_STATUS_COMPLETED}, service.log()
    assert all(job.card_analysis_result.summary for job in jobs.values())


@pytest.mark.parametrize("program", ["job-service", "ai-gateway"])
def test_beyond_loopback_without_tls_it_refuses_to_start_unless_insecure(
    program: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SAN_JOBS_", "SAN_GATEWAY_"))}
    database = ["--database-url", f"sqlite+aiosqlite:///{tmp_path / 'jobs.db'}"]
    extra = [*database, "--gateway", NO_GATEWAY] if program == "job-service" else []
    argv = [str(BIN / program), "--listen", "0.0.0.0:0", *extra]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, check=False)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "refusing to listen on 0.0.0.0:0 (not a loopback address)" in lines[0]
    assert "--insecure" in lines[0]
    assert not (tmp_path / "jobs.db").exists()  # refused before the database is touched

    with running(start_service(program, [program, *argv[1:], "--insecure"], tmp_path, env)) as it:
        assert it.address.startswith("0.0.0.0:")
        with grpc.insecure_channel(f"127.0.0.1:{it.address.rpartition(':')[2]}") as plain:
            assert health_status(plain) == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--tls-cert", "{certs}/job-service.pem"], 2, "--tls-cert needs --tls-key"),
        (
            ["--tls-cert", "{certs}/missing.pem", "--tls-key", "{certs}/job-service-key.pem"],
            1,
            "cannot read the certificate file",
        ),
        (
            ["--tls-cert", "{certs}/job-service.pem", "--tls-key", "{certs}/san-web-key.pem"],
            1,
            "does not belong to the certificate",
        ),
        (
            ["--gateway-tls-ca", "{certs}/job-service-key.pem"],
            1,
            "holds no PEM certificate",
        ),
    ],
)
def test_bad_tls_files_are_a_one_line_startup_error(
    certs: Path, tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    argv = [
        str(BIN / "job-service"),
        *("--database-url", f"sqlite+aiosqlite:///{tmp_path / 'jobs.db'}"),
        *(arg.format(certs=certs) for arg in args),
    ]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == code
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("program", ["job-service", "ai-gateway"])
def test_sighup_after_replacing_the_cert_files_serves_the_new_certificate(
    program: str, certs: Path, tmp_path: Path
) -> None:
    live = tmp_path / "live"
    live.mkdir()
    for suffix in (".pem", "-key.pem"):
        shutil.copy(certs / f"{program}{suffix}", live / f"server{suffix}")
    args = ["--tls-cert", str(live / "server.pem"), "--tls-key", str(live / "server-key.pem")]
    args += ["--tls-client-ca", str(certs / "ca.pem")]
    if program == "job-service":
        service = start_job_service(tmp_path, *args, gateway=NO_GATEWAY)
    else:
        service = start_gateway(tmp_path, *args)
    with running(service):
        old, new = serial_of(certs / f"{program}.pem"), serial_of(certs / "san-web.pem")
        assert served_serial(service.address, certs, "operator") == old
        # The rotation: another certificate of the same CA (valid for localhost too).
        for suffix in (".pem", "-key.pem"):
            shutil.copy(certs / f"san-web{suffix}", live / f"server{suffix}")
        assert served_serial(service.address, certs, "operator") == old  # not before SIGHUP
        service.proc.send_signal(signal.SIGHUP)
        # The signal is handled soon, not at once: ask until a new connection sees it.
        for _ in range(400):
            if served_serial(service.address, certs, "operator") == new:
                break
            time.sleep(0.05)
        assert served_serial(service.address, certs, "operator") == new, service.log()
        with grpc.secure_channel(service.address, client_credentials(certs, "operator")) as ch:
            assert health_status(ch) == health_pb2.HealthCheckResponse.SERVING
        assert service.proc.poll() is None  # the same process: never restarted
        assert service.log().count("listening on") == 1
        assert "TLS certificate reloaded" in service.log()
