"""Assembles JobService: storage, worker, streams, gRPC server with health and
reflection, and the shutdown sequence on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from collections.abc import Iterable
from typing import Any

import grpc
from grpc_health.v1 import health_pb2
from opentelemetry.sdk.trace import TracerProvider

from san_jobs.job_service.app import JobApplication
from san_jobs.job_service.auth.bearer_tokens import TokenVerifier
from san_jobs.job_service.auth.certificates import CertificateAllowList
from san_jobs.job_service.auth.interceptor import AuthInterceptor
from san_jobs.job_service.change_feed import ChangeFeed
from san_jobs.job_service.count_folding import CountFolder
from san_jobs.job_service.db_health import DatabaseHealth
from san_jobs.job_service.dispatch_breaker import BreakerConfig
from san_jobs.job_service.domain.backoff import BackoffPolicy
from san_jobs.job_service.domain.errors import StorageError
from san_jobs.job_service.domain.model import TERMINAL_STATUSES, Job
from san_jobs.job_service.domain.retention import parse_retention
from san_jobs.job_service.domain.validation import EnqueueLimits
from san_jobs.job_service.gateway_stream import StreamingAiGateway
from san_jobs.job_service.logformat import log_formatter
from san_jobs.job_service.metrics import JobServiceMetrics
from san_jobs.job_service.pending_quota import PendingQuota
from san_jobs.job_service.pruner import Pruner, PrunerConfig
from san_jobs.job_service.schedule_app import ScheduleApplication
from san_jobs.job_service.schedule_firer import ScheduleFirer
from san_jobs.job_service.settings import JobServiceSettings
from san_jobs.job_service.storage.api_tokens import SqlTokenStore
from san_jobs.job_service.storage.migrate import MigrationLockTimeout, migrate
from san_jobs.job_service.storage.notify import PgChangeListener
from san_jobs.job_service.storage.repository import SqlJobStore
from san_jobs.job_service.storage.schema_version import SchemaMismatch, prepare_schema
from san_jobs.job_service.transport.open_streams import address_admission
from san_jobs.job_service.transport.servicer import JobServiceServicer, add_job_service_to_server
from san_jobs.job_service.transport.stream_limits import StreamGate, StreamLimits
from san_jobs.job_service.updates import UpdateHub
from san_jobs.job_service.worker import Worker, WorkerConfig
from san_jobs.proto.jobs.v1 import job_service_pb2
from san_jobs.shared import grpc_server, health, memory_return, reflection, tls
from san_jobs.shared.grpc_metrics import GrpcServerMetrics
from san_jobs.shared.grpc_server import StartupError as StartupError
from san_jobs.shared.metrics_http import MetricsListenError, MetricsServer
from san_jobs.shared.safe_text import mask_secrets, safe_text
from san_jobs.shared.sqlite_files import prepare_sqlite_url
from san_jobs.shared.trace_logging import install_trace_ids
from san_jobs.shared.tracing import Tracing, start_tracing

log = logging.getLogger("job_service")

# The statuses another instance's notification names when a change may be in the feed.
_FEED_STATUSES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "PENDING"})

SERVICE_NAME = job_service_pb2.DESCRIPTOR.services_by_name["JobService"].full_name

SERVER_OPTIONS: list[tuple[str, Any]] = [
    # grpc.max_concurrent_streams depends on the settings: see concurrent_streams_option.
    # Message size limits depend on the settings: see message_size_options.
    # Keepalive: find dead clients of long streams, and let clients ping us.
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.so_reuseport", 0),
]


# HTTP/2 streams a connection may hold beyond its StreamJobUpdates bound: room for
# unary calls (Enqueue, GetJob, ...) and health checks next to a full set of streams.
UNARY_CALLS_PER_CONNECTION = 1_000


def concurrent_streams_option(settings: JobServiceSettings) -> tuple[str, int]:
    """grpc.max_concurrent_streams: the per-connection stream bound plus room for
    unary calls, so a connection full of streams still answers Enqueue. A client past
    it waits for a free slot (grpc queues the call); it is never refused for it."""
    return (
        "grpc.max_concurrent_streams",
        settings.max_streams_per_connection + UNARY_CALLS_PER_CONNECTION,
    )


def message_size_options(settings: JobServiceSettings) -> list[tuple[str, int]]:
    """--max-message-bytes as gRPC's receive and send limits: a bigger request gets
    RESOURCE_EXHAUSTED from gRPC before any of our code reads it."""
    return [
        ("grpc.max_receive_message_length", settings.max_message_bytes),
        ("grpc.max_send_message_length", settings.max_message_bytes),
    ]


def stream_limits(settings: JobServiceSettings) -> StreamLimits:
    """The StreamJobUpdates bounds the settings ask for."""
    return StreamLimits(
        max_streams=settings.max_streams,
        max_streams_per_peer=settings.max_streams_per_peer,
        max_streams_per_connection=settings.max_streams_per_connection,
        max_feeds=settings.max_feeds,
        max_feeds_per_peer=settings.max_feeds_per_peer,
    )


def auth_interceptors(
    settings: JobServiceSettings, store: SqlJobStore
) -> list[grpc.aio.ServerInterceptor[Any, Any]]:
    """--auth token and/or --tls-client-roles: the interceptor that checks every
    call's bearer token (read from api_tokens through the job store's engine) or
    client certificate, and its role (san_jobs.job_service.auth)."""
    verifier = TokenVerifier(SqlTokenStore(store.engine)) if settings.checks_tokens() else None
    certificates = (
        CertificateAllowList(settings.tls_client_roles) if settings.checks_certificates() else None
    )
    if verifier is None and certificates is None:
        return []
    return [AuthInterceptor(verifier, certificates)]


def tracing_interceptors(
    tracing: Tracing | None,
) -> list[grpc.aio.ServerInterceptor[Any, Any]]:
    """A span for each RPC when tracing is on; none (no cost at all) when off."""
    return [] if tracing is None else [tracing.interceptor()]


def metrics_interceptors(
    metrics: JobServiceMetrics | None,
) -> list[grpc.aio.ServerInterceptor[Any, Any]]:
    """The RPC counter (san_jobs_grpc_server_*) when metrics are on; none when off."""
    return [] if metrics is None else [GrpcServerMetrics(metrics.registry, "san_jobs")]


def is_authenticated(settings: JobServiceSettings) -> bool:
    """True when the service checks who calls: tokens (--auth token) or client
    certificates (mutual TLS)."""
    # getattr: the `auth` setting may not exist in every build of this module.
    return settings.auth == "token" or settings.tls_client_ca is not None


def check_exposure(settings: JobServiceSettings) -> None:
    """StartupError when `settings` would serve beyond loopback without TLS and
    authentication and without --insecure (san_jobs.shared.grpc_server)."""
    grpc_server.check_exposure(
        settings.listen,
        settings.metrics_listen,
        tls=settings.serves_tls(),
        authenticated=is_authenticated(settings),
        insecure=settings.insecure,
    )


def server_tls(settings: JobServiceSettings) -> grpc.ServerCredentials | None:
    """The TLS credentials to serve with (None: plain text); StartupError, one line."""
    return grpc_server.server_tls(settings.tls_cert, settings.tls_key, settings.tls_client_ca)


def gateway_tls(settings: JobServiceSettings) -> grpc.ChannelCredentials | None:
    """The TLS credentials to call the gateway with (None: plain text); StartupError,
    one line, when a file cannot be used."""
    if not settings.calls_gateway_over_tls():
        return None
    try:
        return tls.channel_credentials(
            settings.gateway_tls_ca, settings.gateway_tls_cert, settings.gateway_tls_key
        )
    except tls.TlsFileError as error:
        raise StartupError(f"gateway TLS: {error}") from None


def describe_tls(settings: JobServiceSettings) -> str:
    """How the service listens, for its start line."""
    if not settings.serves_tls():
        return "plaintext"
    return "mutual TLS" if settings.tls_client_ca is not None else "TLS"


def configure_logging(settings: JobServiceSettings) -> None:
    # Our format names no source file or line, so don't walk the stack for them on
    # every record: a few log lines per job are on the hot path.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler()
    install_trace_ids(handler)  # record.trace_id, for either format
    # Either format: a value sent by a caller cannot forge a line, put a control
    # character in the log, or show a database password.
    handler.setFormatter(log_formatter(settings.log_format, settings.instance_id))
    logging.basicConfig(level=settings.log_level, handlers=[handler])


async def migrate_only(settings: JobServiceSettings) -> None:
    configure_logging(settings)
    await prepare_database(settings, migrating=True)
    log.info("database at %s is migrated", _safe_url(settings.database_url))


class JobServiceRuntime:
    """One running JobService: start() brings every part up, stop() takes it down
    in the order that loses nothing. `serve` wraps it with signal handling; tests
    run it in-process on a loopback port."""

    def __init__(
        self, settings: JobServiceSettings, tracer_provider: TracerProvider | None = None
    ) -> None:
        """`tracer_provider`: trace with it (tests share one between servers); else
        with --otlp-endpoint's, or not at all (san_jobs.shared.tracing)."""
        check_exposure(settings)
        # Read the TLS files first: a bad one is a one-line StartupError before anything opens.
        self.server_credentials = server_tls(settings)
        gateway_credentials = gateway_tls(settings)
        self.settings = settings
        self.port = 0
        self.tracing = start_tracing("job-service", settings.otlp_endpoint, tracer_provider)
        # --metrics-listen: the metrics, in a registry of this runtime's own; None: no
        # metric is counted at all (nothing on the hot path).
        self.metrics = None if settings.metrics_listen is None else JobServiceMetrics()
        self.metrics_server: MetricsServer | None = None
        self.store = SqlJobStore(
            settings.database_url,
            instance_id=settings.instance_id,
            enqueue_interval=settings.batch_interval,
        )
        self.hub = UpdateHub()
        self.gateway = StreamingAiGateway(
            settings.gateway,
            settings.max_message_bytes,
            gateway_credentials,
            token=settings.gateway_token(),
        )
        self.worker = Worker(
            self.store,
            self.gateway,
            self._worker_published,
            WorkerConfig(
                concurrency=settings.workers,
                # A group claimed ahead while the current one runs (worker/config.py says why).
                claim_ahead=settings.workers,
                lease_seconds=settings.lease,
                poll_interval=settings.poll_interval,
                batch_interval=settings.batch_interval,
                deadlines=settings.deadlines(),
                backoff=BackoffPolicy(settings.retry_base_delay, settings.retry_max_delay),
                breaker=BreakerConfig(
                    failures=settings.breaker_failures,
                    probe_interval=settings.breaker_probe_interval,
                    max_pause=settings.breaker_max_pause,
                    unreachable_after=settings.breaker_unreachable_after,
                    instance_id=settings.instance_id,
                    longest_rate_limit_pause=settings.retry_max_delay,
                ),
                limits=settings.claim_limits(),
                max_per_caller=settings.max_running_per_caller,
            ),
            tracer=None if self.tracing is None else self.tracing.tracer,
            metrics=self.metrics,
        )
        self.count_folder = CountFolder(self.store.queries)
        self.app = JobApplication(
            self.store,
            self.hub,
            self.worker,
            settings.instance_id,
            settings.max_attempts,
            PendingQuota(self.store.queries.pending_count, settings.max_pending_per_caller),
        )
        # Retention: every instance runs one; the store's lock lets one at a time work.
        self.pruner = Pruner(
            self.store.retention,
            PrunerConfig(retention=settings.retention(), interval=settings.prune_interval),
            on_deleted=None if self.metrics is None else self.metrics.pruned,
        )
        # StreamJobChanges: this instance's view of the change feed (change_feed.py).
        self.change_feed = ChangeFeed(
            self.store.changes,
            retention_seconds=parse_retention(settings.retain_changes),
            prune_interval=settings.prune_interval,
        )
        self.hub.add_listener(self.change_feed.on_published)
        # Schedules: every instance fires the due ones; the database picks one per period.
        self.schedule_firer = ScheduleFirer(self.store.schedules, self._schedule_enqueued)
        # The schedule RPCs' use cases; a schedule created or resumed here replans the firer.
        self.schedules = ScheduleApplication(
            self.store.schedules,
            replan=self.schedule_firer.replan,
            max_per_caller=settings.max_schedules_per_caller,
        )
        self.server = grpc.aio.server(
            # Tracing first: a call the authentication refuses has its span too.
            interceptors=[
                # Metrics first of all: refused calls are counted, with their code.
                *metrics_interceptors(self.metrics),
                *tracing_interceptors(self.tracing),
                *auth_interceptors(settings, self.store),
            ],
            options=[
                *SERVER_OPTIONS,
                concurrent_streams_option(settings),
                *message_size_options(settings),
            ],
        )
        self.stream_gate = StreamGate(stream_limits(settings))
        add_job_service_to_server(
            JobServiceServicer(
                self.app,
                EnqueueLimits(settings.max_text_chars),
                settings.max_attempts,
                stream_gate=self.stream_gate,
                max_message_bytes=settings.max_message_bytes,
                pruner=self.pruner,
                change_feed=self.change_feed,
                schedules=self.schedules,
                urgent=settings.urgent_priorities(),
            ),
            self.server,
        )
        # Health needs no token: its requests and streams are bounded (san_jobs.shared.health),
        # its streams counted in the per-peer bound by address; the memory of a large
        # refused request goes back to the system (san_jobs.shared.memory_return).
        memory_return.return_large_blocks()
        open_streams = address_admission(self.stream_gate)
        self.health = health.HealthServicer(open_streams)
        self.health.add_to_server(self.server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME),
            self.server,
            open_streams,
        )
        self.listener: PgChangeListener | None = None
        # Tasks started from callbacks (_worker_published), held until they end.
        self._background: set[asyncio.Task[None]] = set()
        # Readiness (the JobService name) follows the database; "" (liveness) does not.
        self.db_health = DatabaseHealth(
            self.store, self._set_ready, interval=settings.health_interval
        )

    @property
    def address(self) -> str:
        return f"{self.settings.listen.rpartition(':')[0]}:{self.port}"

    async def start(self) -> None:
        try:
            self.port = grpc_server.bind(self.server, self.settings.listen, self.server_credentials)
        except StartupError:
            await self.store.close()
            raise
        try:
            self._start_metrics()
        except MetricsListenError as error:
            await self.server.stop(None)
            await self.store.close()
            raise StartupError(str(error)) from None
        if self.settings.database_url.startswith("postgresql"):
            self.listener = PgChangeListener(
                self.settings.database_url,
                ignore_origin=self.settings.instance_id,
                on_change=self._on_remote_change,
                on_reconnect=self._on_notifications_reconnected,
            )
            await self.listener.start()
        await self.change_feed.start()
        await self.server.start()
        self.worker.start()
        self.count_folder.start()
        self.pruner.start()
        self.schedule_firer.start()
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        self.db_health.start()

    async def _schedule_enqueued(self, job: Job) -> None:
        """A schedule's period enqueued `job` (committed): streams hear of it, and
        the worker runs it."""
        self.hub.publish([job])
        self.worker.wake()

    def _worker_published(self, jobs: Iterable[Job]) -> None:
        """The worker's writes, committed: streams hear of them. On SQLite a job that
        ended with dependents also changed theirs in its statement (migration 0017's
        trigger; on PostgreSQL the trigger's NOTIFY tells every instance, this one
        too): wake the worker for the one now due, and publish them."""
        jobs = list(jobs)
        self.hub.publish(jobs)
        if self.settings.database_url.startswith("postgresql"):
            return
        ended = [j.id for j in jobs if j.has_dependents and j.status in TERMINAL_STATUSES]
        if ended:
            task = asyncio.create_task(self.app.on_dependencies_ended(ended))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _on_remote_change(self, origin: str, status: str, job_ids: list[str]) -> None:
        """Another instance committed changes (PostgreSQL NOTIFY)."""
        if status in _FEED_STATUSES:
            self.change_feed.nudge()
        await self.app.on_remote_change(origin, status, job_ids)

    async def _on_notifications_reconnected(self) -> None:
        self.change_feed.nudge()
        await self.app.on_notifications_reconnected()

    def _start_metrics(self) -> None:
        """--metrics-listen: serve /metrics (MetricsListenError when it cannot listen)."""
        if self.metrics is None or self.settings.metrics_listen is None:
            return
        self.metrics.watch_stats(self.store.queries.stats, asyncio.get_running_loop())
        self.metrics.watch_pauses(self.worker.paused_types)
        self.metrics.watch_streams(lambda: self.stream_gate.open_streams)
        self.metrics.watch_change_feed(
            lambda: self.change_feed.position, lambda: self.change_feed.streams
        )
        self.metrics_server = MetricsServer(
            self.settings.metrics_listen, self.metrics.registry, insecure=self.settings.insecure
        )
        self.metrics_server.start()
        log.info("metrics at %s", self.metrics_server.url)

    async def _set_ready(self, ready: bool) -> None:
        status = health_pb2.HealthCheckResponse
        await self.health.set(SERVICE_NAME, status.SERVING if ready else status.NOT_SERVING)

    async def stop(self) -> None:
        log.info("shutting down: no new claims; in-flight jobs get %.0fs", self.settings.grace)
        await self.db_health.stop()
        await self.health.enter_graceful_shutdown()
        await self.pruner.stop()
        await self.schedule_firer.stop()
        await self.worker.stop(self.settings.grace)
        # The dependents' news of the last outcomes (_worker_published): let them end
        # (a few reads each), before the store they read from closes.
        if self._background:
            await asyncio.wait(set(self._background), timeout=self.settings.grace)
            for task in set(self._background):
                task.cancel()
        await self.count_folder.stop()
        await self.change_feed.stop()
        # Streams never end by themselves; give unary calls a moment, then end the rest.
        await self.server.stop(1.0)
        if self.listener is not None:
            await self.listener.stop()
        await self.gateway.close()
        if self.tracing is not None:
            await self.tracing.shutdown()  # the spans still queued go out now
        if self.metrics_server is not None:
            # Last before the store closes: a scrape meanwhile still gets its numbers.
            await asyncio.to_thread(self.metrics_server.stop)
        with contextlib.suppress(StorageError):
            await self.store.close()
        log.info("job-service stopped")


async def prepare_database(settings: JobServiceSettings, *, migrating: bool = False) -> None:
    """`job-service migrate` (`migrating`): bring the schema to this code's. A start:
    check that this code may run on the schema, migrating it first when that is safe
    (storage/schema_version.py)."""
    try:
        prepare_sqlite_url(settings.database_url)
        if migrating:
            await migrate(settings.database_url)
        else:
            await prepare_schema(settings.database_url, migrate_on_start=settings.migrate_on_start)
    except (SchemaMismatch, MigrationLockTimeout) as refusal:
        raise StartupError(safe_text(str(refusal))) from None
    except Exception as error:
        # Driver messages may quote the URL, and span lines: one line, password masked.
        raise StartupError(
            safe_text(f"cannot prepare the database at {settings.database_url}: {error}")
        ) from None


async def serve(settings: JobServiceSettings) -> None:
    configure_logging(settings)
    # Refuse before the database is touched: exposure, then every TLS file.
    check_exposure(settings)
    server_tls(settings)
    gateway_tls(settings)
    await prepare_database(settings)
    runtime = JobServiceRuntime(settings)
    await runtime.start()
    # Everything made at start (modules, engines, the server) lives until the end:
    # keep it out of the garbage collector's full passes, which otherwise walk those
    # hundreds of thousands of objects again and again under load (a tenth of the CPU
    # of an Enqueue, measured with callgrind).
    gc.freeze()
    log.info(
        "job-service listening on %s (%s, database %s, gateway %s%s, %d workers, event loop %s)",
        runtime.address,
        describe_tls(settings),
        _safe_url(settings.database_url),
        settings.gateway,
        " over TLS" if settings.calls_gateway_over_tls() else "",
        settings.workers,
        type(asyncio.get_running_loop()).__module__.split(".")[0],
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, reload_tls_files)
    await stop.wait()
    await runtime.stop()


def reload_tls_files() -> None:
    """SIGHUP: the next connections use the certificate files as they are now
    (rotation without a restart); connections already open keep theirs."""
    log.info("SIGHUP: TLS files will be re-read before the next connection")
    tls.request_reload()


def _safe_url(url: str) -> str:
    """The database URL without a password, for logs."""
    return mask_secrets(url)
