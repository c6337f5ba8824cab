"""Build, run and stop the gateway's gRPC server (with health and reflection)."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
from typing import Any

import grpc
from grpc_health.v1 import health_pb2
from opentelemetry.sdk.trace import TracerProvider

from san_jobs.ai_gateway.backends.base import Backend
from san_jobs.ai_gateway.backends.instant import InstantBackend
from san_jobs.ai_gateway.backends.local.backend import LocalBackend
from san_jobs.ai_gateway.bounds import StreamLimits
from san_jobs.ai_gateway.callers import Authenticator, CallerTokens
from san_jobs.ai_gateway.calllog import CallLog
from san_jobs.ai_gateway.decoding import add_servicer
from san_jobs.ai_gateway.fallback import Fallback, PrimaryCircuit
from san_jobs.ai_gateway.faults import FaultInjector
from san_jobs.ai_gateway.gateway import Gateway
from san_jobs.ai_gateway.limits import ConcurrencyLimiter, RateLimiter
from san_jobs.ai_gateway.metrics import GatewayMetrics
from san_jobs.ai_gateway.result_cache import ResultCache
from san_jobs.ai_gateway.servicer import AiGatewayServicer
from san_jobs.ai_gateway.settings import BackendName, GatewaySettings
from san_jobs.ai_gateway.transport_errors import DOMAIN
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2
from san_jobs.shared import grpc_server, health, memory_return, reflection, tls
from san_jobs.shared.client_identity import peer_host
from san_jobs.shared.grpc_metrics import GrpcServerMetrics
from san_jobs.shared.grpc_server import StartupError
from san_jobs.shared.metrics_http import MetricsListenError, MetricsServer
from san_jobs.shared.open_rpcs import PeerStreamCap
from san_jobs.shared.tracing import start_tracing

logger = logging.getLogger("ai_gateway")

SERVICE_NAME = ai_gateway_pb2.DESCRIPTOR.services_by_name["AiGatewayService"].full_name
SERVER_OPTIONS = [
    # so_reuseport off: a second gateway on the same port must fail, not share it.
    ("grpc.so_reuseport", 0),
    # A StreamCalls stream lives for hours and is often quiet, or carries one long
    # model call: its client's keepalive pings (JobService: every 30 s) then come
    # with no data between them. By default a server takes more than one such ping
    # per 5 minutes as abuse and ends the connection ("too_many_pings"), failing the
    # calls on it. Accept one every 10 s; ping quiet clients ourselves, so calls of a
    # caller that vanished are cancelled.
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
]
# Health and reflection streams (they need no credential) open at once, per client
# address and in all: a few per JobService instance, and nothing a stranger can grow.
OPEN_STREAMS_PER_PEER = 32
OPEN_STREAMS_TOTAL = 512


def server_options(settings: GatewaySettings) -> list[tuple[str, int]]:
    """SERVER_OPTIONS plus the message size limits of ``settings``.

    One limit both ways: a StreamCalls request message may batch many calls (JobService
    sends at most its own --max-message-bytes plus envelope per call); a result that
    would not fit in a response fails alone (see :mod:`san_jobs.ai_gateway.stream`).
    """
    return [
        *SERVER_OPTIONS,
        ("grpc.max_receive_message_length", settings.max_message_bytes),
        ("grpc.max_send_message_length", settings.max_message_bytes),
    ]


def make_backend(settings: GatewaySettings, name: BackendName | None = None) -> Backend:
    """The backend named ``name`` (default: ``settings.backend``)."""
    name = name or settings.backend
    if name == "openai":
        # Imported only for it: httpx brings 139 modules (its CLI's click, rich and
        # pygments among them) that a gateway on the local backend never uses, 0.1 s
        # of CPU at every start.
        from san_jobs.ai_gateway.backends.openai import OpenAIBackend

        return OpenAIBackend(
            base_url=settings.openai_base_url,
            api_key=settings.api_key().get_secret_value(),
            chat_model=settings.openai_chat_model,
            embedding_model=settings.openai_embedding_model,
            max_input_tokens=settings.max_input_tokens,
        )
    if name == "instant":
        return InstantBackend()
    return LocalBackend()


def model_identity(settings: GatewaySettings) -> str:
    """What names the primary's models in result cache keys: another model, another
    answer (the openai backend's two models are settings; the others' are fixed)."""
    if settings.backend == "openai":
        return f"openai:{settings.openai_chat_model}+{settings.openai_embedding_model}"
    return settings.backend


def make_fallback(settings: GatewaySettings, primary: Backend) -> Fallback | None:
    """The fallback around ``primary`` (None without --fallback-backend)."""
    if settings.fallback_backend is None:
        return None
    circuit = PrimaryCircuit(
        primary.name, failures=settings.primary_failures, cooldown=settings.fallback_cooldown
    )
    fallback = make_backend(settings, settings.fallback_backend)
    return Fallback(primary, fallback, circuit, reserve=settings.fallback_reserve)


def make_authenticator(settings: GatewaySettings) -> Authenticator:
    """Who may call: holders of a --caller-tokens-file token, or of a client
    certificate when the server requires one (--tls-client-ca); else anyone."""
    path = settings.caller_tokens_file
    tokens = CallerTokens(path) if path is not None else None
    return Authenticator(
        tokens,
        client_certificates=settings.tls_client_ca is not None,
        client_names=settings.client_names(),
    )


def check_exposure(settings: GatewaySettings) -> None:
    """StartupError when `settings` would serve beyond loopback without TLS and
    caller authentication (client certificates or --caller-tokens-file) and without
    --insecure (san_jobs.shared.grpc_server)."""
    grpc_server.check_exposure(
        settings.listen,
        settings.metrics_listen,
        tls=settings.serves_tls(),
        authenticated=settings.tls_client_ca is not None or settings.caller_tokens_file is not None,
        insecure=settings.insecure,
    )


def server_tls(settings: GatewaySettings) -> grpc.ServerCredentials | None:
    """The TLS credentials to serve with (None: plain text); StartupError, one line."""
    return grpc_server.server_tls(settings.tls_cert, settings.tls_key, settings.tls_client_ca)


def describe_tls(settings: GatewaySettings) -> str:
    """How the gateway listens, for its start line."""
    if not settings.serves_tls():
        return "plaintext"
    return "mutual TLS" if settings.tls_client_ca is not None else "TLS"


class GatewayServer:
    """The gRPC server with its backend, limits and call log; start, then stop once."""

    def __init__(
        self,
        settings: GatewaySettings,
        backend: Backend | None = None,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        """``tracer_provider``: trace with it (tests share one between servers); else
        with --otlp-endpoint's, or not at all (san_jobs.shared.tracing)."""
        check_exposure(settings)
        # Read the TLS files before anything opens: a bad one is a one-line StartupError.
        self.credentials = server_tls(settings)
        self.settings = settings
        self.tracing = start_tracing("ai-gateway", settings.otlp_endpoint, tracer_provider)
        self.backend = backend or make_backend(settings)
        self.fallback = make_fallback(settings, self.backend)
        faults = settings.faults()
        self.call_log = CallLog(settings.call_log)
        self.gateway = Gateway(
            self.backend,
            max_input_tokens=settings.max_input_tokens,
            rate_limiter=RateLimiter(settings.rate_limit, settings.burst),
            concurrency=ConcurrencyLimiter(settings.max_concurrency),
            faults=FaultInjector(faults),
            min_deadline=settings.min_deadline,
            fallback=self.fallback,
            cache=ResultCache(settings.cache_entries, settings.cache_ttl),
            model=model_identity(settings),
        )
        # --metrics-listen: the metrics, in a registry of this server's own; None: no
        # metric is counted at all.
        self.metrics = None if settings.metrics_listen is None else GatewayMetrics()
        self.metrics_server: MetricsServer | None = None
        # A span for each RPC when tracing is on; no interceptor (no cost) when off.
        interceptors: list[grpc.aio.ServerInterceptor[Any, Any]] = []
        if self.metrics is not None:  # first: every RPC counted, with the code it ended with
            interceptors.append(GrpcServerMetrics(self.metrics.registry, "san_aigateway"))
        if self.tracing is not None:
            interceptors.append(self.tracing.interceptor())
        self.server = grpc.aio.server(interceptors=interceptors, options=server_options(settings))
        # Health and reflection need no credential: requests and streams bounded
        # (san_jobs.shared.health), streams capped per address; the memory of a large
        # refused request goes back to the system (san_jobs.shared.memory_return).
        memory_return.return_large_blocks()
        self.open_streams = PeerStreamCap(
            OPEN_STREAMS_PER_PEER,
            OPEN_STREAMS_TOTAL,
            DOMAIN,
            lambda context: peer_host(context.peer()),
        )
        self.health = health.HealthServicer(self.open_streams)
        self.authenticator = make_authenticator(settings)
        self.servicer = AiGatewayServicer(
            self.gateway,
            self.call_log,
            StreamLimits.for_message_bytes(settings.max_message_bytes, settings.max_stream_calls),
            self.authenticator,
            tracer=None if self.tracing is None else self.tracing.tracer,
            metrics=self.metrics,
        )
        add_servicer(self.servicer, self.server)  # bad bytes: INVALID_ARGUMENT (decoding.py)
        self.health.add_to_server(self.server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME),
            self.server,
            self.open_streams,
        )
        self.port = 0

    async def start(self) -> int:
        """Bind, start serving, mark SERVING; return the bound port."""
        self.port = grpc_server.bind(self.server, self.settings.listen, self.credentials)
        if self.metrics is not None and self.settings.metrics_listen is not None:
            self.metrics_server = MetricsServer(
                self.settings.metrics_listen, self.metrics.registry, insecure=self.settings.insecure
            )
            try:
                self.metrics_server.start()
            except MetricsListenError as error:
                self.metrics_server = None
                raise StartupError(str(error)) from None
            logger.info("metrics at %s", self.metrics_server.url)
        await self.server.start()
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        faults = self.settings.faults()
        if faults.enabled:
            logger.warning("FAULT INJECTION IS ON: %s", faults.describe())
        host = self.settings.listen.rpartition(":")[0]
        logger.info(
            "ai-gateway listening on %s:%d (%s, backend=%s, event loop %s)",
            host,
            self.port,
            describe_tls(self.settings),
            self.backend.name,
            type(asyncio.get_running_loop()).__module__.split(".")[0],
        )
        if self.fallback is not None:
            logger.info(
                "fallback backend %s: serves calls when %s fails transiently; %d failures "
                "in a row open the circuit for %.1f s",
                self.fallback.fallback.name,
                self.backend.name,
                self.settings.primary_failures,
                self.settings.fallback_cooldown,
            )
        if self.settings.cache_entries:
            logger.info(
                "result cache: %d answers, %.0f s each",
                self.settings.cache_entries,
                self.settings.cache_ttl,
            )
        return self.port

    def reload_files(self) -> None:
        """SIGHUP: re-read the TLS files before the next connection (certificate
        rotation without a restart) and the caller tokens."""
        logger.info("SIGHUP: TLS files will be re-read before the next connection")
        tls.request_reload()
        self.reload_callers()

    def reload_callers(self) -> None:
        """SIGHUP: re-read --caller-tokens-file (a bad file keeps the current list)."""
        if self.authenticator.tokens is not None:
            self.authenticator.tokens.reload()

    async def stop(self, grace: float | None = None) -> None:
        """NOT_SERVING, let calls in flight finish within ``grace``, then release all."""
        await self.health.enter_graceful_shutdown()
        grace = self.settings.grace if grace is None else grace
        logger.info("ai-gateway stopping (grace %.1f s)", grace)
        # Streams stay open as long as their caller likes: tell them to end once their
        # calls in flight are answered, or the stop would always last the whole grace.
        self.servicer.drain()
        await self.server.stop(grace)
        await self.servicer.close()
        if self.metrics_server is not None:
            await asyncio.to_thread(self.metrics_server.stop)
        await self.backend.aclose()
        if self.fallback is not None:
            await self.fallback.fallback.aclose()
        self.call_log.close()
        if self.tracing is not None:
            await self.tracing.shutdown()  # the spans still queued go out now
        logger.info("ai-gateway stopped")


async def serve(settings: GatewaySettings) -> None:
    """Run until SIGTERM or SIGINT, then shut down gracefully."""
    server = GatewayServer(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, server.reload_files)
    try:
        await server.start()
    except BaseException:
        await server.backend.aclose()
        if server.fallback is not None:
            await server.fallback.fallback.aclose()
        server.call_log.close()
        raise
    # What start made lives until the end: keep it out of the collector's full passes.
    gc.freeze()
    await stop.wait()
    await server.stop()
