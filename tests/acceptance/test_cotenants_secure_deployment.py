"""Issue 22's proof: a hostile caller against the full secure deployment the README
describes, all real processes on loopback ports.

    ai-gateway   mutual TLS, admits only job-service's certificate (--tls-client-names)
    job-service  TLS + mutual TLS + --auth token, PostgreSQL, certificates allow-listed,
                 calls the gateway over mutual TLS
    san-web      HTTPS, --auth password, calls job-service over TLS with its token

Callers: two tenants (alice-svc and bob-svc, submitter tokens), a viewer, an operator,
san-web's own token, and outsiders with no token (some on other loopback addresses:
127.0.0.2 and 127.0.0.3 route to this machine like 127.0.0.1). Each test takes one
point of the issue (all sixteen are here); each point also has its own, finer tests
next to its module. The two tests that restart a service (JobService for point 16,
AiGateway for point 15) run last: pytest keeps the file's order."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, quote_plus

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from san_jobs.proto.aigateway.v1 import ai_gateway_pb2, ai_gateway_pb2_grpc
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from scripts.dev_certs import write_dev_certs
from tests.support.databases import create_temp_postgres_database, drop_database, require_postgres
from tests.support.fake_openai_server import FakeOpenAI
from tests.support.jobs_api import SAMPLE_TEXT, card_request
from tests.support.processes import (
    RunningService,
    start_gateway,
    start_job_service,
    start_service,
    stop_all,
)
from tests.support.program_forks import run_forked
from tests.support.rich_errors import rich_error

pytestmark = [pytest.mark.acceptance, pytest.mark.postgres]

BIN = Path(sys.executable).parent
ELSEWHERE = "127.0.0.2"  # another client on this machine's loopback
IDLER = "127.0.0.3"
TENANTS = ("alice-svc", "bob-svc")
WEB_USERS = {"ann": "a long quiet passphrase", "ops": "night shift passphrase"}
# How long a test waits for what must happen before calling it missing: a bound on a
# failure, never a measure of speed.
PATIENCE = 20.0
FEEDS_PER_CALLER = 3
GATEWAY_LATENCY = ("--fault-latency", "3")


@dataclass
class Deployment:
    certs: Path
    folder: Path
    database_url: str
    tokens: dict[str, str]
    gateway: RunningService
    job_service: RunningService
    web: RunningService
    gateway_args: list[str] = field(default_factory=list)
    job_service_args: list[str] = field(default_factory=list)

    def credentials(self, certificate: str | None = "operator") -> grpc.ChannelCredentials:
        """Trust the dev CA and present `certificate` (a `make certs` name)."""
        chain = (self.certs / f"{certificate}.pem").read_bytes() if certificate else None
        key = (self.certs / f"{certificate}-key.pem").read_bytes() if certificate else None
        return grpc.ssl_channel_credentials(
            (self.certs / "ca.pem").read_bytes(), private_key=key, certificate_chain=chain
        )

    def metadata(self, name: str) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.tokens[name]}"),)

    def web_url(self, path: str = "") -> str:
        return f"https://{self.web.address}{path}"

    def web_client(self, local_address: str | None = None) -> httpx.Client:
        verify = ssl.create_default_context(cafile=str(self.certs / "ca.pem"))
        transport = httpx.HTTPTransport(local_address=local_address, verify=verify)
        return httpx.Client(base_url=self.web_url(), transport=transport, timeout=PATIENCE)

    def tokens_command(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_forked(
            BIN / "job-service", ["tokens", *args, "--database-url", self.database_url]
        )


def _token(database_url: str, name: str, role: str) -> str:
    made = run_forked(
        BIN / "job-service",
        ["tokens", "create", name, "--role", role, "--database-url", database_url],
    )
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


def _web_user(database_url: str, name: str, password: str, role: str) -> None:
    made = run_forked(
        BIN / "san-web",
        ["users", "create", name, "--role", role, "--database-url", database_url],
        input=password,
    )
    assert made.returncode == 0, made.stderr


def _tls(certs: Path, name: str) -> list[str]:
    return [
        *("--tls-cert", str(certs / f"{name}.pem")),
        *("--tls-key", str(certs / f"{name}-key.pem")),
        *("--tls-client-ca", str(certs / "ca.pem")),
    ]


def _start_gateway(folder: Path, certs: Path, *extra: str) -> RunningService:
    return start_gateway(
        folder, *_tls(certs, "ai-gateway"), "--metrics-listen", "127.0.0.1:0", *extra
    )


def _start_job_service(
    folder: Path, certs: Path, database_url: str, gateway: str, *extra: str
) -> RunningService:
    args = [
        *_tls(certs, "job-service"),
        *("--auth", "token"),
        # The certificates that may connect at all; the token says who calls.
        *("--tls-client-roles", "san-web=submitter"),
        *("--tls-client-roles", "operator=operator"),
        *("--gateway-tls-ca", str(certs / "ca.pem")),
        *("--gateway-tls-cert", str(certs / "job-service.pem")),
        *("--gateway-tls-key", str(certs / "job-service-key.pem")),
        *("--max-feeds-per-peer", str(FEEDS_PER_CALLER)),
        *("--poll-interval", "0.2"),
        *("--grace", "1"),
        *("--metrics-listen", "127.0.0.1:0"),
        *extra,
    ]
    return start_job_service(folder, *args, gateway=gateway, database_url=database_url)


def _start_web(folder: Path, certs: Path, job_service: str, token_file: Path) -> RunningService:
    argv = [
        "san-web",
        *("--listen", "127.0.0.1:0"),
        *("--job-service", job_service),
        *("--database-url", f"sqlite+aiosqlite:///{folder / 'san-web.db'}"),
        *("--auth", "password"),
        *("--tls-cert", str(certs / "san-web.pem")),
        *("--tls-key", str(certs / "san-web-key.pem")),
        *("--job-service-tls-ca", str(certs / "ca.pem")),
        *("--job-service-tls-cert", str(certs / "san-web.pem")),
        *("--job-service-tls-key", str(certs / "san-web-key.pem")),
        *("--job-service-token-file", str(token_file)),
        *("--header-timeout", "2"),
    ]
    return start_service("san-web", argv, folder)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    reason = require_postgres()
    if reason is not None:
        pytest.skip(reason)
    folder = tmp_path_factory.mktemp("secure-deployment")
    certs = folder / "certs"
    write_dev_certs(certs)
    database_url = create_temp_postgres_database()
    tokens = {name: _token(database_url, name, "submitter") for name in TENANTS}
    tokens["viewer"] = _token(database_url, "viewer", "viewer")
    tokens["ops"] = _token(database_url, "ops", "operator")
    tokens["san-web"] = _token(database_url, "san-web", "submitter")
    token_file = folder / "san-web.token"
    token_file.write_text(tokens["san-web"] + "\n")
    token_file.chmod(0o600)
    web_database = f"sqlite+aiosqlite:///{folder / 'san-web.db'}"
    _web_user(web_database, "ann", WEB_USERS["ann"], "user")
    _web_user(web_database, "ops", WEB_USERS["ops"], "operator")
    started: list[RunningService] = []
    try:
        # Each call takes 3 s: jobs stay active long enough to collide with.
        gateway = _start_gateway(folder, certs, *GATEWAY_LATENCY)
        started.append(gateway)
        job_service = _start_job_service(folder, certs, database_url, gateway.address)
        started.append(job_service)
        web = _start_web(folder, certs, job_service.address, token_file)
        started.append(web)
        deployed = Deployment(certs, folder, database_url, tokens, gateway, job_service, web)
        yield deployed
        started[:2] = [deployed.gateway, deployed.job_service]  # a test may restart them
    finally:
        try:
            stop_all(*reversed(started))
        finally:
            drop_database(database_url)


@contextlib.asynccontextmanager
async def job_channel(
    deployment: Deployment, certificate: str | None = "operator"
) -> AsyncIterator[pb_grpc.JobServiceStub]:
    credentials = deployment.credentials(certificate)
    async with grpc.aio.secure_channel(deployment.job_service.address, credentials) as channel:
        yield pb_grpc.JobServiceStub(channel)


def _ids_in(error: grpc.aio.AioRpcError) -> str:
    """Everything an error tells its caller: code, message, details, trailers."""
    return " ".join(
        [str(error.details()), repr(error.trailing_metadata()), repr(rich_error(error))]
    )


# Point 2: keys belong to their tenant.
async def test_two_tenants_share_no_key_and_no_answer_names_the_other(
    deployment: Deployment,
) -> None:
    target, request_id = f"scrap-{uuid.uuid4().hex[:8]}", f"req-{uuid.uuid4().hex[:8]}"
    async with job_channel(deployment) as stub:
        alice = await stub.Enqueue(
            card_request(target, SAMPLE_TEXT, request_id=request_id),
            metadata=deployment.metadata("alice-svc"),
            timeout=PATIENCE,
        )
        # bob sends her request id, then her target, every way: his own jobs only.
        bob = await stub.Enqueue(
            card_request(f"{target}-b", SAMPLE_TEXT, request_id=request_id),
            metadata=deployment.metadata("bob-svc"),
            timeout=PATIENCE,
        )
        assert bob.job.id != alice.job.id and not bob.deduplicated
        assert bob.job.requested_by == "bob-svc"
        same_target = await stub.Enqueue(
            card_request(
                target,
                SAMPLE_TEXT,
                on_duplicate=pb.ON_DUPLICATE_RETURN_EXISTING,
            ),
            metadata=deployment.metadata("bob-svc"),
            timeout=PATIENCE,
        )
        assert same_target.job.id not in (alice.job.id, bob.job.id)
        assert same_target.job.requested_by == "bob-svc"
        with pytest.raises(grpc.aio.AioRpcError) as rejected:
            await stub.Enqueue(
                card_request(target, SAMPLE_TEXT),
                metadata=deployment.metadata("bob-svc"),
                timeout=PATIENCE,
            )
        assert rejected.value.code() == grpc.StatusCode.ALREADY_EXISTS
        told = _ids_in(rejected.value)
        assert same_target.job.id in told and alice.job.id not in told
        batch = await stub.BatchEnqueue(
            pb.BatchEnqueueRequest(
                requests=[
                    card_request(f"{target}-x", SAMPLE_TEXT, request_id=request_id),
                    card_request(
                        target,
                        SAMPLE_TEXT,
                        on_duplicate=pb.ON_DUPLICATE_RETURN_EXISTING,
                    ),
                ]
            ),
            metadata=deployment.metadata("bob-svc"),
            timeout=PATIENCE,
        )
        assert alice.job.id.encode() not in batch.SerializeToString()
        # alice still finds her own job, by her key.
        again = await stub.Enqueue(
            card_request(target, SAMPLE_TEXT, request_id=request_id),
            metadata=deployment.metadata("alice-svc"),
            timeout=PATIENCE,
        )
        assert again.deduplicated and again.job.id == alice.job.id


# Point 4: a certificate of the CA is not enough.
async def test_only_job_services_certificate_reaches_the_gateway(deployment: Deployment) -> None:
    request = ai_gateway_pb2.AnalyzeContentRequest(text=SAMPLE_TEXT)
    for certificate in ("operator", "san-web"):
        credentials = deployment.credentials(certificate)
        async with grpc.aio.secure_channel(deployment.gateway.address, credentials) as channel:
            stub = ai_gateway_pb2_grpc.AiGatewayServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.AnalyzeContent(request, timeout=PATIENCE)
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED, certificate
    credentials = deployment.credentials("job-service")
    async with grpc.aio.secure_channel(deployment.gateway.address, credentials) as channel:
        answer = await ai_gateway_pb2_grpc.AiGatewayServiceStub(channel).AnalyzeContent(
            request, timeout=PATIENCE
        )
        assert answer.summary


async def test_job_service_admits_only_its_listed_certificates(deployment: Deployment) -> None:
    async with job_channel(deployment, "ai-gateway") as stub:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.ListJobs(
                pb.ListJobsRequest(), metadata=deployment.metadata("ops"), timeout=PATIENCE
            )
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    async with job_channel(deployment, "operator") as stub:
        await stub.ListJobs(
            pb.ListJobsRequest(), metadata=deployment.metadata("ops"), timeout=PATIENCE
        )


# Point 6: per-caller stream bounds count callers, not the address they share.
async def test_one_callers_feeds_do_not_use_up_another_callers(deployment: Deployment) -> None:
    async with job_channel(deployment) as stub:
        feeds = [
            stub.StreamJobUpdates(
                pb.StreamJobUpdatesRequest(), metadata=deployment.metadata("viewer")
            )
            for _ in range(FEEDS_PER_CALLER)
        ]
        try:
            # Each feed is admitted once it sees a change.
            opened = await stub.Enqueue(
                card_request(f"feeds-{uuid.uuid4().hex[:8]}", SAMPLE_TEXT),
                metadata=deployment.metadata("alice-svc"),
                timeout=PATIENCE,
            )
            for feed in feeds:
                await asyncio.wait_for(_first_update_of(feed, opened.job.id), PATIENCE)
            over = stub.StreamJobUpdates(
                pb.StreamJobUpdatesRequest(), metadata=deployment.metadata("viewer")
            )
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await over.read()
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            # The operator, on the same address and connection, still gets a feed.
            mine = stub.StreamJobUpdates(
                pb.StreamJobUpdatesRequest(), metadata=deployment.metadata("ops")
            )
            job = await stub.Enqueue(
                card_request(f"feed-{uuid.uuid4().hex[:8]}", SAMPLE_TEXT),
                metadata=deployment.metadata("alice-svc"),
                timeout=PATIENCE,
            )
            seen = await asyncio.wait_for(_first_update_of(mine, job.job.id), PATIENCE)
            assert seen == job.job.id
            mine.cancel()
        finally:
            for feed in feeds:
                feed.cancel()


async def _first_update_of(stream: grpc.aio.UnaryStreamCall, job_id: str) -> str:  # type: ignore[type-arg]
    async for update in stream:
        if update.job.id == job_id:
            return str(update.job.id)
    raise AssertionError("the feed ended")


# Point 5: a revoked token's open streams end.
async def test_revoking_a_token_ends_its_open_feed(deployment: Deployment) -> None:
    token = _token(deployment.database_url, "doomed-viewer", "viewer")
    async with job_channel(deployment) as stub:
        feed = stub.StreamJobUpdates(
            pb.StreamJobUpdatesRequest(), metadata=(("authorization", f"Bearer {token}"),)
        )
        # A feed says nothing until a job changes: make one change, see it arrive.
        job = await stub.Enqueue(
            card_request(f"revoke-{uuid.uuid4().hex[:8]}", SAMPLE_TEXT),
            metadata=deployment.metadata("alice-svc"),
            timeout=PATIENCE,
        )
        assert await asyncio.wait_for(_first_update_of(feed, job.job.id), PATIENCE)
        revoked = deployment.tokens_command("revoke", "doomed-viewer")
        assert revoked.returncode == 0, revoked.stderr
        started = time.monotonic()
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            async with asyncio.timeout(PATIENCE):
                async for _update in feed:
                    pass
        assert ended.value.code() == grpc.StatusCode.UNAUTHENTICATED
        # The token cache period is 2 s: the feed ends within a period or two.
        assert time.monotonic() - started < 5.0


# Point 12 (JobService): tokens can expire, and the list says when.
def test_a_token_with_an_expiry_is_listed_with_it(deployment: Deployment) -> None:
    made = deployment.tokens_command(
        "create", "short-lived", "--role", "viewer", "--expires-in", "1h"
    )
    assert made.returncode == 0, made.stderr
    listed = deployment.tokens_command("list")
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert "EXPIRES" in header
    row = next(row for row in rows if row.split()[0] == "short-lived")
    assert str(time.gmtime().tm_year) in row.split(None, 4)[-1]


# Point 13: an identifier cannot hide a bidi override.
async def test_a_target_with_a_bidi_override_is_refused_naming_the_field(
    deployment: Deployment,
) -> None:
    async with job_channel(deployment) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Enqueue(
                card_request("scrap-\u202edeliaf", SAMPLE_TEXT),
                metadata=deployment.metadata("alice-svc"),
                timeout=PATIENCE,
            )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "target_id" in _ids_in(refused.value)


# Points 3 and 8: guesses at once are throttled, elsewhere's guesses lock nobody out, and
# X-Forwarded-For gives a guesser no fresh address.
def test_login_guesses_at_once_are_throttled_and_do_not_lock_the_operator_out(
    deployment: Deployment,
) -> None:
    async def guesses() -> Counter[int]:
        verify = ssl.create_default_context(cafile=str(deployment.certs / "ca.pem"))
        transport = httpx.AsyncHTTPTransport(local_address=ELSEWHERE, verify=verify)
        async with httpx.AsyncClient(
            base_url=deployment.web_url(), transport=transport, timeout=PATIENCE
        ) as client:

            async def one(index: int) -> int:
                answer = await client.post(
                    "/api/session",
                    json={"username": "ops", "password": f"wrong guess {index}"},
                    headers={"X-Forwarded-For": f"203.0.113.{index}"},
                )
                return answer.status_code

            return Counter(await asyncio.gather(*(one(i) for i in range(15))))

    codes = asyncio.run(guesses())
    assert codes[401] <= 5, codes
    assert codes[429] + codes[503] >= 10, codes
    with deployment.web_client() as operator:
        answer = operator.post(
            "/api/session", json={"username": "ops", "password": WEB_USERS["ops"]}
        )
        assert answer.status_code == 200, answer.text


# Point 7: idle connections of one client do not take san-web from the others, and a
# socket that never starts TLS is cut off at --header-timeout.
def test_idle_sockets_of_one_client_leave_san_web_to_the_others(deployment: Deployment) -> None:
    host, port = deployment.web.address.rsplit(":", 1)
    idle = []
    try:
        for _ in range(100):
            sock = socket.socket()
            sock.bind((IDLER, 0))
            sock.connect((host, int(port)))
            idle.append(sock)
        with deployment.web_client() as client:
            assert client.get("/healthz").status_code == 200
        # Never a byte of TLS: the server closes it within --header-timeout (2 s).
        idle[0].settimeout(PATIENCE)
        started = time.monotonic()
        with contextlib.suppress(ConnectionResetError):
            assert idle[0].recv(1) == b""
        assert time.monotonic() - started < 10
    finally:
        for sock in idle:
            sock.close()


# Points 11 and 12 (san-web): big numbers are a 422; HSTS; passwords have a minimum.
def test_san_web_answers_a_huge_number_with_422_and_sends_hsts(deployment: Deployment) -> None:
    with deployment.web_client() as client:
        answer = client.post(
            "/api/session",
            content='{"username": "ann", "password": ' + "9" * 5000 + "}",
            headers={"Content-Type": "application/json"},
        )
        assert answer.status_code == 422, answer.text
        assert "max-age=" in answer.headers["strict-transport-security"]
    short = subprocess.run(
        [sys.executable, "-m", "san_jobs.web", "users", "create", "carol",
         "--database-url", f"sqlite+aiosqlite:///{deployment.folder / 'san-web.db'}"],
        input="x", capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert short.returncode == 2 and "Traceback" not in short.stderr, short.stderr


# Point 1: health is open to all, and bounded for all.
def test_health_stays_open_and_answers_every_part(deployment: Deployment) -> None:
    for address in (deployment.gateway.address, deployment.job_service.address):
        with grpc.secure_channel(address, deployment.credentials("operator")) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=PATIENCE
            )
            assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_a_huge_health_name_is_refused_on_every_part(deployment: Deployment) -> None:
    options = [("grpc.max_send_message_length", -1)]
    for address in (deployment.gateway.address, deployment.job_service.address):
        credentials = deployment.credentials("operator")
        async with grpc.aio.secure_channel(address, credentials, options=options) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            watch = stub.Watch(health_pb2.HealthCheckRequest(service="x" * 1_000_000))
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await asyncio.wait_for(watch.read(), PATIENCE)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, address
            reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=PATIENCE)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING


# Point 10: bytes that are no message are INVALID_ARGUMENT, not UNKNOWN.
async def test_the_gateway_answers_undecodable_bytes_with_invalid_argument(
    deployment: Deployment,
) -> None:
    credentials = deployment.credentials("job-service")
    async with grpc.aio.secure_channel(deployment.gateway.address, credentials) as channel:
        raw = channel.unary_unary(
            "/san.aigateway.v1.AiGatewayService/AnalyzeContent",
            request_serializer=None,
            response_deserializer=None,
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await raw(b"\xff\xff\xff\xff\x0f", timeout=PATIENCE)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "Traceback" not in deployment.gateway.log()


# Point 9: the metrics listeners are bounded: half-sent requests do not start a thread
# each, a scrape is still served after them, and 0.0.0.0 is refused at start.
def _threads(service: RunningService) -> int:
    status = Path(f"/proc/{service.proc.pid}/status").read_text()
    return int(re.search(r"^Threads:\s+(\d+)", status, re.MULTILINE).group(1))  # type: ignore[union-attr]


def _metrics_address(service: RunningService) -> tuple[str, int]:
    match = re.search(r"metrics at http://([0-9.]+):(\d+)/metrics", service.log())
    assert match, service.log_tail()
    return match.group(1), int(match.group(2))


@pytest.mark.parametrize("part", ["gateway", "job_service"])
def test_half_sent_metrics_requests_do_not_grow_threads(deployment: Deployment, part: str) -> None:
    service: RunningService = getattr(deployment, part)
    host, port = _metrics_address(service)
    before = _threads(service)
    half_sent = []
    try:
        for _ in range(300):
            conn = socket.create_connection((host, port), timeout=PATIENCE)
            conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never the blank line
            half_sent.append(conn)
        time.sleep(0.5)
        grown = _threads(service) - before
        assert grown <= 16, f"{grown} threads for 300 half-sent requests"
    finally:
        for conn in half_sent:
            conn.close()
    # Refused (503) while the cut connections' slots are freed; then served again.
    deadline = time.monotonic() + PATIENCE
    while True:
        with contextlib.suppress(httpx.HTTPError):
            answer = httpx.get(f"http://{host}:{port}/metrics", timeout=5)
            if answer.status_code == 200:
                break
            assert answer.status_code == 503, answer.status_code
        assert time.monotonic() < deadline, "no scrape served after the half-sent requests"
        time.sleep(0.2)
    assert "# TYPE" in answer.text


def test_metrics_beyond_loopback_are_refused_at_start(deployment: Deployment) -> None:
    argv = [
        str(BIN / "job-service"),
        *("--listen", "127.0.0.1:0", "--metrics-listen", "0.0.0.0:0"),
        *("--database-url", deployment.database_url),
        *_tls(deployment.certs, "job-service"),
    ]
    refused = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode != 0
    assert "refusing to serve metrics on 0.0.0.0:0" in refused.stderr.strip().splitlines()[-1]
    assert "Traceback" not in refused.stderr


# Point 14: an upstream that echoes the API key URL-encoded has it masked in the log, on
# a gateway deployed like the others (mutual TLS, job-service's certificate only).
async def test_an_encoded_echo_of_the_api_key_is_masked_in_the_log(
    deployment: Deployment,
) -> None:
    key = "sk-proj-Abc/123+SECRETdef=456ghi789"  # its encoded forms differ from it
    key_file = deployment.folder / "openai.key"
    key_file.write_text(key + "\n")
    key_file.chmod(0o600)
    upstream = FakeOpenAI()
    upstream.start()
    gateway = _start_gateway(
        deployment.folder / "openai-gateway",
        deployment.certs,
        *("--backend", "openai", "--openai-base-url", upstream.base_url),
        *("--openai-api-key-file", str(key_file), "--openai-chat-model", "echo-key-encoded"),
    )
    try:
        credentials = deployment.credentials("job-service")
        async with grpc.aio.secure_channel(gateway.address, credentials) as channel:
            stub = ai_gateway_pb2_grpc.AiGatewayServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.AnalyzeContent(
                    ai_gateway_pb2.AnalyzeContentRequest(text=SAMPLE_TEXT), timeout=PATIENCE
                )
        assert key not in str(refused.value.details())
    finally:
        stop_all(gateway)
        upstream.stop()
    logged = gateway.log()
    assert "HTTP 401" in logged, gateway.log_tail()
    for form in (key, quote(key, safe=""), quote_plus(key), key.replace("/", "\\/")):
        assert form not in logged, form


# Point 16 (restarts job-service): scraps taken while JobService is down reach it within
# 5 s of its return, over TLS with san-web's token, after the channel's backoff grew.
async def test_scraps_taken_while_job_service_was_down_arrive_soon_after_it_returns(
    deployment: Deployment,
) -> None:
    address = deployment.job_service.address
    with deployment.web_client() as ann:
        login = ann.post("/api/session", json={"username": "ann", "password": WEB_USERS["ann"]})
        assert login.status_code == 200, login.text
        csrf = {"x-csrf-token": login.json()["csrfToken"]}
        deployment.job_service.kill()
        scraps = []
        for index in range(5):
            taken = ann.post("/api/scraps", json={"text": f"{SAMPLE_TEXT} #{index}"}, headers=csrf)
            assert taken.status_code == 202, taken.text
            scraps.append(taken.json()["scrapId"])
        # Long enough for gRPC's reconnect backoff to pass 5 s without a cap.
        await asyncio.sleep(12)
        deployment.job_service = _start_job_service(
            deployment.folder / "job-service-again",
            deployment.certs,
            deployment.database_url,
            deployment.gateway.address,
            *("--listen", address),
        )
        back_at = time.monotonic()
        pending = set(scraps)
        while pending:
            for scrap in list(pending):
                state = ann.get(f"/api/scraps/{scrap}").json()["state"]
                assert state in ("queued", "delivered"), state
                if state == "delivered":
                    pending.discard(scrap)
            late = time.monotonic() - back_at
            assert late < 5.0, f"{len(pending)} scraps still queued {late:.1f} s after"
            await asyncio.sleep(0.2)


# Point 15 (last: it restarts the gateway): a restart of AiGateway costs no attempt.
async def test_a_gateway_restart_costs_a_one_attempt_job_nothing(deployment: Deployment) -> None:
    address = deployment.gateway.address
    deployment.gateway.kill()
    again = _start_gateway(
        deployment.folder / "gateway-again", deployment.certs, *GATEWAY_LATENCY, "--listen", address
    )
    deployment.gateway = again  # the fixture stops this one
    async with job_channel(deployment) as stub:
        job = await stub.Enqueue(
            card_request(f"restart-{uuid.uuid4().hex[:8]}", SAMPLE_TEXT, max_attempts=1),
            metadata=deployment.metadata("alice-svc"),
            timeout=PATIENCE,
        )
        async with asyncio.timeout(PATIENCE * 2):
            while True:
                answer = await stub.GetJob(
                    pb.GetJobRequest(job_id=job.job.id),
                    metadata=deployment.metadata("alice-svc"),
                    timeout=PATIENCE,
                )
                got = answer.job
                if got.status in (pb.JOB_STATUS_COMPLETED, pb.JOB_STATUS_FAILED):
                    break
                await asyncio.sleep(0.2)
    assert got.status == pb.JOB_STATUS_COMPLETED, got.error_message
    assert len(got.attempts) == 1
