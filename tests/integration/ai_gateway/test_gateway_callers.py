"""Who may call the gateway, over real grpc.aio servers on loopback ports: bearer
tokens from --caller-tokens-file, client certificates under mutual TLS, and the
identity that keys the rate limit (never the caller's own x-client-id)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import grpc
import pytest
from gateway_helpers import (
    CountingBackend,
    StartGateway,
    bearer,
    rich,
    wait_for_lines,
    write_caller_tokens,
)

from san_jobs.ai_gateway.backends.instant import InstantBackend
from san_jobs.ai_gateway.bounds import StreamLimits
from san_jobs.ai_gateway.callers import Authenticator
from san_jobs.ai_gateway.calllog import CallLog
from san_jobs.ai_gateway.decoding import add_servicer
from san_jobs.ai_gateway.faults import FaultConfig, FaultInjector
from san_jobs.ai_gateway.gateway import Gateway
from san_jobs.ai_gateway.limits import ConcurrencyLimiter, RateLimiter
from san_jobs.ai_gateway.servicer import AiGatewayServicer
from san_jobs.ai_gateway.settings import GatewaySettings
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2 as pb
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2_grpc as pb_grpc
from san_jobs.shared.client_identity import ClientNames
from san_jobs.shared.tls import channel_credentials, server_credentials
from scripts.dev_certs import write_dev_certs

JOB_SERVICE_TOKEN = "js-" + "k" * 40
WEB_TOKEN = "web-" + "w" * 40
REQUEST = pb.AnalyzeContentRequest(text="Queues hold jobs. Workers run them.")


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    return write_caller_tokens(
        tmp_path / "callers", **{"job-service": JOB_SERVICE_TOKEN, "san-web": WEB_TOKEN}
    )


def assert_unauthenticated(err: grpc.aio.AioRpcError) -> None:
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED
    details = rich(err)
    assert (details.info.domain, details.info.reason) == ("aigateway.san", "UNAUTHENTICATED")


@pytest.mark.parametrize(
    "metadata",
    [
        (),
        bearer("not-a-listed-token-at-all"),
        bearer(JOB_SERVICE_TOKEN[:-1]),
        (("authorization", f"Basic {JOB_SERVICE_TOKEN}"),),
        (("x-client-id", "job-service"),),  # a name is not a credential
    ],
    ids=["none", "unknown", "prefix", "other-scheme", "client-id-only"],
)
async def test_unary_call_without_a_listed_token_is_refused(
    start_gateway: StartGateway, tokens_file: Path, metadata: tuple[tuple[str, str], ...]
) -> None:
    backend = CountingBackend()
    stub = await start_gateway(backend, caller_tokens_file=tokens_file)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.AnalyzeContent(REQUEST, metadata=metadata, timeout=5)
    assert_unauthenticated(caught.value)
    assert backend.calls == 0


async def test_stream_calls_without_a_listed_token_is_refused(
    start_gateway: StartGateway, tokens_file: Path
) -> None:
    backend = CountingBackend()
    stub = await start_gateway(backend, caller_tokens_file=tokens_file)
    for metadata in ((), bearer("not-a-listed-token-at-all")):
        stream = stub.StreamCalls(metadata=metadata)
        # The refusal comes before the gateway reads a request, so it is read first: a
        # write racing it raised the refusal about one run in four, and once grpc's own
        # INTERNAL "Failed execute_batch" in its place (a fresh-clone run).
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await asyncio.wait_for(stream.read(), 10)  # served: nothing comes, it times out
        assert_unauthenticated(caught.value)
        with pytest.raises((grpc.aio.AioRpcError, asyncio.InvalidStateError)):
            await stream.write(
                pb.StreamCallsRequest(calls=[pb.StreamedCall(call_id="1", analyze_content=REQUEST)])
            )
    assert backend.calls == 0


async def test_a_listed_token_is_served_and_names_the_caller(
    start_gateway: StartGateway, tokens_file: Path, tmp_path: Path
) -> None:
    log = tmp_path / "calls.jsonl"
    stub = await start_gateway(backend="instant", caller_tokens_file=tokens_file, call_log=log)
    reply = await stub.AnalyzeContent(
        REQUEST, metadata=bearer(JOB_SERVICE_TOKEN, ("x-client-id", "anything")), timeout=5
    )
    assert reply.model
    stream = stub.StreamCalls(metadata=bearer(WEB_TOKEN))
    await stream.write(
        pb.StreamCallsRequest(calls=[pb.StreamedCall(call_id="1", analyze_content=REQUEST)])
    )
    message = await stream.read()
    assert message.results[0].WhichOneof("outcome") == "analyze_content"
    await stream.done_writing()
    records = [json.loads(line) for line in await wait_for_lines(log, 2)]
    assert [(r["caller"], r["client_id"], r["code"]) for r in records] == [
        ("job-service", "anything", "OK"),
        ("san-web", None, "OK"),
    ]


async def test_a_rotating_client_id_does_not_walk_past_the_rate_limit(
    start_gateway: StartGateway, tokens_file: Path
) -> None:
    stub = await start_gateway(
        backend="instant", rate_limit=0.01, burst=2, caller_tokens_file=tokens_file
    )
    outcomes = []
    for i in range(4):
        metadata = bearer(JOB_SERVICE_TOKEN, ("x-client-id", f"client-{i}"))
        try:
            await stub.AnalyzeContent(REQUEST, metadata=metadata, timeout=5)
            outcomes.append("OK")
        except grpc.aio.AioRpcError as err:
            details = rich(err)
            assert details.quota is not None
            assert details.quota.violations[0].subject == "client:job-service"
            outcomes.append(details.info.reason)
    assert outcomes == ["OK", "OK", "RATE_LIMITED", "RATE_LIMITED"]
    # Another caller's bucket is its own.
    await stub.AnalyzeContent(REQUEST, metadata=bearer(WEB_TOKEN), timeout=5)


async def test_without_authentication_the_peer_address_keys_the_rate_limit(
    start_gateway: StartGateway,
) -> None:
    stub = await start_gateway(backend="instant", rate_limit=0.01, burst=1)
    await stub.AnalyzeContent(REQUEST, metadata=(("x-client-id", "a"),), timeout=5)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.AnalyzeContent(REQUEST, metadata=(("x-client-id", "b"),), timeout=5)
    details = rich(caught.value)
    assert details.info.reason == "RATE_LIMITED"
    assert details.quota is not None
    assert details.quota.violations[0].subject == "client:127.0.0.1"


async def test_reloaded_tokens_file_admits_new_and_refuses_removed_callers(
    start_gateway: StartGateway, tokens_file: Path
) -> None:
    from san_jobs.ai_gateway.server import GatewayServer

    stub = await start_gateway(backend="instant", caller_tokens_file=tokens_file)
    server: GatewayServer = start_gateway.servers[-1]  # type: ignore[attr-defined]
    new_token = "new-" + "n" * 40
    write_caller_tokens(tokens_file, **{"job-service": new_token})
    server.reload_callers()
    await stub.AnalyzeContent(REQUEST, metadata=bearer(new_token), timeout=5)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.AnalyzeContent(REQUEST, metadata=bearer(JOB_SERVICE_TOKEN), timeout=5)
    assert_unauthenticated(caught.value)
    # A broken file (here: nobody listed) on reload keeps the current callers.
    write_caller_tokens(tokens_file)
    server.reload_callers()
    await stub.AnalyzeContent(REQUEST, metadata=bearer(new_token), timeout=5)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("", "lists no caller"),
        ("job-service short\n", "at least 16"),
        (f"a {JOB_SERVICE_TOKEN}\nb {JOB_SERVICE_TOKEN}\n", "listed twice"),
        (f"a {JOB_SERVICE_TOKEN} extra\n", "expected NAME TOKEN"),
    ],
)
def test_a_bad_tokens_file_is_a_settings_error(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "callers"
    path.write_text(content)
    with pytest.raises(ValueError, match=problem) as caught:
        GatewaySettings(caller_tokens_file=path)
    assert JOB_SERVICE_TOKEN not in str(caught.value)  # a token never reaches a message


# Mutual TLS: the client certificate's common name is the caller.


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("certs")
    write_dev_certs(folder)
    return folder


async def test_mutual_tls_client_certificate_names_the_caller(certs: Path, tmp_path: Path) -> None:
    log = CallLog(tmp_path / "calls.jsonl")
    gateway = Gateway(
        InstantBackend(),
        max_input_tokens=8192,
        rate_limiter=RateLimiter(0.01, 1),
        concurrency=ConcurrencyLimiter(8),
        faults=FaultInjector(FaultConfig()),
        min_deadline=0.0,
    )
    servicer = AiGatewayServicer(
        gateway,
        log,
        StreamLimits(),
        Authenticator(
            client_certificates=True, client_names=ClientNames.parse("job-service,operator")
        ),
    )
    server = grpc.aio.server()
    add_servicer(servicer, server)
    credentials = server_credentials(
        certs / "ai-gateway.pem", certs / "ai-gateway-key.pem", certs / "ca.pem"
    )
    port = server.add_secure_port("127.0.0.1:0", credentials)
    await server.start()
    try:
        for client, caller in (("job-service", "job-service"), ("operator", "operator")):
            channel_creds = channel_credentials(
                certs / "ca.pem", certs / f"{client}.pem", certs / f"{client}-key.pem"
            )
            async with grpc.aio.secure_channel(f"localhost:{port}", channel_creds) as channel:
                stub = pb_grpc.AiGatewayServiceStub(channel)
                await stub.AnalyzeContent(
                    REQUEST, metadata=(("x-client-id", "someone-else"),), timeout=5
                )
                # The certificate's bucket is spent, whatever x-client-id says.
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await stub.AnalyzeContent(
                        REQUEST, metadata=(("x-client-id", "another"),), timeout=5
                    )
                quota = rich(caught.value).quota
                assert quota is not None and quota.violations[0].subject == f"client:{caller}"
        records = [json.loads(line) for line in await wait_for_lines(log.path, 4)]  # type: ignore[arg-type]
        assert [r["caller"] for r in records] == ["job-service"] * 2 + ["operator"] * 2
    finally:
        await server.stop(0)
        log.close()
