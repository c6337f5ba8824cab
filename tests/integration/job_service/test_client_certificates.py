"""JobService's mutual TLS with an allow-list of client certificates (issue 22, point 4),
in-process on a real loopback port with the development CA's certificates (SQLite and
PostgreSQL): only a listed certificate is admitted, any other gets PERMISSION_DENIED;
under --auth off the listed certificate is the caller, with the role the list gives
it; under --auth token the token still decides. Health answers every certificate."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from san_jobs.job_service.auth.bearer_tokens import new_token, token_hash
from san_jobs.job_service.storage.api_tokens import SqlTokenStore
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from scripts.dev_certs import write_dev_certs
from tests.integration.job_service.conftest import Service, StartService
from tests.integration.job_service.scripted_gateway import Hang
from tests.support.jobs_api import SAMPLE_TEXT, card_request
from tests.support.rich_errors import RichError, rich_error


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The development CA; client certificates "operator" and "san-web" (its CN)."""
    folder = tmp_path_factory.mktemp("certs")
    write_dev_certs(folder)
    return folder


@pytest.fixture
async def channels() -> AsyncIterator[list[grpc.aio.Channel]]:
    made: list[grpc.aio.Channel] = []
    yield made
    for channel in made:
        await channel.close()


async def start(start_service: StartService, certs: Path, **settings: Any) -> Service:
    service = await start_service(
        tls_cert=certs / "job-service.pem",
        tls_key=certs / "job-service-key.pem",
        tls_client_ca=certs / "ca.pem",
        workers=1,
        **settings,
    )
    service.gateway.script = lambda _j, _a: Hang()
    return service


def connect(
    service: Service, certs: Path, client: str, channels: list[grpc.aio.Channel]
) -> grpc.aio.Channel:
    """A channel presenting the development certificate named `client`."""
    credentials = grpc.ssl_channel_credentials(
        (certs / "ca.pem").read_bytes(),
        private_key=(certs / f"{client}-key.pem").read_bytes(),
        certificate_chain=(certs / f"{client}.pem").read_bytes(),
    )
    channel = grpc.aio.secure_channel(f"127.0.0.1:{service.runtime.port}", credentials)
    channels.append(channel)
    return channel


async def failure(call: Awaitable[object]) -> RichError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return rich_error(caught.value)


async def health(channel: grpc.aio.Channel) -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    return int((await stub.Check(health_pb2.HealthCheckRequest(), timeout=10)).status)


def enqueue_request() -> pb.EnqueueRequest:
    return card_request(f"cert-{uuid.uuid4().hex[:12]}", SAMPLE_TEXT)


async def test_a_listed_certificate_is_the_caller_with_its_role_another_is_denied(
    start_service: StartService, certs: Path, channels: list[grpc.aio.Channel]
) -> None:
    service = await start(
        start_service, certs, auth="off", tls_client_roles={"operator": "submitter"}
    )
    listed = pb_grpc.JobServiceStub(connect(service, certs, "operator", channels))
    request = enqueue_request()
    request.requested_by = "someone else"  # the certificate says who calls, not the request
    job = (await listed.Enqueue(request, timeout=10)).job
    assert job.requested_by == "operator"
    assert (await listed.GetJob(pb.GetJobRequest(job_id=job.id), timeout=10)).job.id == job.id
    # Its role is the list's: a submitter has no stats and no live feed.
    denied = await failure(listed.GetJobStats(pb.GetJobStatsRequest(), timeout=10))
    assert denied.code == grpc.StatusCode.PERMISSION_DENIED
    assert denied.metadata == {"rpc": "GetJobStats", "role": "submitter"}

    unlisted_channel = connect(service, certs, "san-web", channels)
    unlisted = pb_grpc.JobServiceStub(unlisted_channel)
    for call in (
        unlisted.Enqueue(enqueue_request(), timeout=10),
        unlisted.GetJob(pb.GetJobRequest(job_id=job.id), timeout=10),
        unlisted.StreamJobUpdates(pb.StreamJobUpdatesRequest(job_ids=[job.id]), timeout=10).read(),
    ):
        error = await failure(call)
        assert error.code == grpc.StatusCode.PERMISSION_DENIED, error
        assert (error.domain, error.reason) == ("jobs.san", "PERMISSION_DENIED")
        assert "client certificate 'san-web' is not on --tls-client-roles" in error.message
    # Health answers every certificate the CA signed (probes need no allow-listing).
    assert await health(unlisted_channel) == health_pb2.HealthCheckResponse.SERVING


async def test_under_auth_token_the_list_admits_and_the_token_decides(
    start_service: StartService, certs: Path, channels: list[grpc.aio.Channel]
) -> None:
    service = await start(
        start_service, certs, auth="token", tls_client_roles={"operator": "operator"}
    )
    token = new_token()
    await SqlTokenStore(service.runtime.store.engine).add("web-1", "submitter", token_hash(token))
    md = (("authorization", f"Bearer {token}"),)

    listed = pb_grpc.JobServiceStub(connect(service, certs, "operator", channels))
    job = (await listed.Enqueue(enqueue_request(), metadata=md, timeout=10)).job
    assert job.requested_by == "web-1"  # the token's name, not the certificate's
    error = await failure(listed.GetJobStats(pb.GetJobStatsRequest(), metadata=md, timeout=10))
    assert error.code == grpc.StatusCode.PERMISSION_DENIED  # the token's role: submitter
    error = await failure(listed.Enqueue(enqueue_request(), timeout=10))
    assert error.code == grpc.StatusCode.UNAUTHENTICATED  # a listed certificate, no token

    unlisted = pb_grpc.JobServiceStub(connect(service, certs, "san-web", channels))
    error = await failure(unlisted.Enqueue(enqueue_request(), metadata=md, timeout=10))
    assert error.code == grpc.StatusCode.PERMISSION_DENIED  # a good token does not help


async def test_without_a_list_streams_are_counted_per_certificate(
    start_service: StartService, certs: Path, channels: list[grpc.aio.Channel]
) -> None:
    service = await start(start_service, certs, auth="off", max_streams_per_peer=1)
    operator = pb_grpc.JobServiceStub(connect(service, certs, "operator", channels))
    web = pb_grpc.JobServiceStub(connect(service, certs, "san-web", channels))
    job_id = (await operator.Enqueue(enqueue_request(), timeout=10)).job.id
    request = pb.StreamJobUpdatesRequest(job_ids=[job_id])
    first = operator.StreamJobUpdates(request, timeout=30)
    assert (await first.read()).job.id == job_id

    error = await failure(operator.StreamJobUpdates(request, timeout=10).read())
    assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error.quota_violations == ["caller:operator"]
    other = web.StreamJobUpdates(request, timeout=30)  # same address, another certificate
    assert (await asyncio.wait_for(other.read(), 10)).job.id == job_id
    first.cancel()
    other.cancel()
