"""Under mutual TLS the gateway admits the certificates it is told to (--tls-client-names,
default JobService's), not every certificate its CA signed: over a real TLS gateway on
a loopback port, with the certificates of `make certs` (scripts/dev_certs.py), the
operator's and san-web's certificates get PERMISSION_DENIED and reach no backend."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from gateway_helpers import CountingBackend, StartGateway, bearer, rich, write_caller_tokens

from san_jobs.ai_gateway.cli import load_settings
from san_jobs.ai_gateway.settings import GatewaySettings
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2 as pb
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2_grpc as pb_grpc
from san_jobs.shared.tls import channel_credentials
from scripts.dev_certs import write_dev_certs

REQUEST = pb.AnalyzeContentRequest(text="Queues hold jobs. Workers run them.")
TOKEN = "web-" + "w" * 40


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("certs")
    write_dev_certs(folder)
    return folder


def mutual_tls(certs: Path) -> dict[str, Any]:
    return {
        "tls_cert": certs / "ai-gateway.pem",
        "tls_key": certs / "ai-gateway-key.pem",
        "tls_client_ca": certs / "ca.pem",
    }


@pytest.fixture
async def channels(
    certs: Path,
) -> AsyncIterator[Callable[[int, str], pb_grpc.AiGatewayServiceStub]]:
    opened: list[grpc.aio.Channel] = []

    def stub(port: int, client: str) -> pb_grpc.AiGatewayServiceStub:
        credentials = channel_credentials(
            certs / "ca.pem", certs / f"{client}.pem", certs / f"{client}-key.pem"
        )
        channel = grpc.aio.secure_channel(f"localhost:{port}", credentials)
        opened.append(channel)
        return pb_grpc.AiGatewayServiceStub(channel)

    yield stub
    for channel in opened:
        await channel.close()


def assert_denied(err: grpc.aio.AioRpcError, name: str) -> None:
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED, err.details()
    details = rich(err)
    assert (details.info.domain, details.info.reason) == ("aigateway.san", "PERMISSION_DENIED")
    assert details.info.metadata["certificateName"] == name
    assert name in details.message


async def test_only_job_services_certificate_is_admitted_by_default(
    start_gateway: StartGateway, certs: Path, channels: Any
) -> None:
    backend = CountingBackend()
    await start_gateway(backend, **mutual_tls(certs))
    port = start_gateway.port  # type: ignore[attr-defined]
    reply = await channels(port, "job-service").AnalyzeContent(REQUEST, timeout=5)
    assert reply.model
    for other in ("operator", "san-web"):
        stub = channels(port, other)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.AnalyzeContent(REQUEST, timeout=5)
        assert_denied(caught.value, other)
        # A stream is refused when it opens, like an unknown caller's: before any
        # request is written. (A write racing the refusal could fail in grpc's core
        # first, and the call then reads INTERNAL "Internal error from Core" on the
        # client side: seen in full runs. So nothing is written.)
        stream = stub.StreamCalls()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stream.read()
        assert_denied(caught.value, other)
    assert backend.calls == 1  # the refused callers reached no model


async def test_the_names_listed_are_admitted_and_star_admits_any(
    start_gateway: StartGateway, certs: Path, channels: Any
) -> None:
    await start_gateway(
        backend="instant", tls_client_names="job-service, san-web", **mutual_tls(certs)
    )
    port = start_gateway.port  # type: ignore[attr-defined]
    assert (await channels(port, "san-web").AnalyzeContent(REQUEST, timeout=5)).model
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await channels(port, "operator").AnalyzeContent(REQUEST, timeout=5)
    assert_denied(caught.value, "operator")

    await start_gateway(backend="instant", tls_client_names="*", **mutual_tls(certs))
    port = start_gateway.port  # type: ignore[attr-defined]
    assert (await channels(port, "operator").AnalyzeContent(REQUEST, timeout=5)).model


async def test_a_listed_token_is_admitted_whatever_the_certificate(
    start_gateway: StartGateway, certs: Path, channels: Any, tmp_path: Path
) -> None:
    # The tokens file is its own list of callers; the certificate names do not apply.
    tokens = write_caller_tokens(tmp_path / "callers", **{"san-web": TOKEN})
    await start_gateway(backend="instant", caller_tokens_file=tokens, **mutual_tls(certs))
    stub = channels(start_gateway.port, "operator")  # type: ignore[attr-defined]
    assert (await stub.AnalyzeContent(REQUEST, metadata=bearer(TOKEN), timeout=5)).model
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.AnalyzeContent(REQUEST, timeout=5)
    assert_denied(caught.value, "operator")
    assert "caller token" in rich(caught.value).message


def test_the_flag_reads_a_list_and_needs_mutual_tls(certs: Path) -> None:
    tls = mutual_tls(certs)
    argv = [f"--{k.replace('_', '-')}={v}" for k, v in tls.items()]
    settings = load_settings([*argv, "--tls-client-names", "job-service,ops@example"])
    assert settings.client_names().names == {"job-service", "ops@example"}
    assert GatewaySettings(**tls).client_names().names == {"job-service"}
    with pytest.raises(ValueError, match="--tls-client-names needs --tls-client-ca"):
        GatewaySettings(tls_client_names="job-service")
    for bad in ("", " , ", "job-service,,san-web"):
        with pytest.raises(ValueError, match="name"):
            GatewaySettings(tls_client_names=bad, **tls)
