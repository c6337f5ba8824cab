"""Assembles JobService: storage, worker, streams, gRPC server with health and
reflection, and the shutdown sequence on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from san.jobs.v1 import job_service_pb2, job_service_pb2_grpc

from job_service.app import JobApplication
from job_service.domain.backoff import BackoffPolicy
from job_service.domain.errors import StorageUnavailableError
from job_service.domain.validation import EnqueueLimits
from job_service.gateway_stream import StreamingAiGateway
from job_service.logformat import CachedTimeFormatter
from job_service.settings import JobServiceSettings
from job_service.storage.migrate import migrate
from job_service.storage.notify import PgChangeListener
from job_service.storage.repository import SqlJobStore
from job_service.transport.servicer import JobServiceServicer
from job_service.updates import UpdateHub
from job_service.worker import Worker, WorkerConfig

log = logging.getLogger("job_service")

SERVICE_NAME = job_service_pb2.DESCRIPTOR.services_by_name["JobService"].full_name

SERVER_OPTIONS: list[tuple[str, Any]] = [
    # Streams: many long-lived calls per connection (the web backend multiplexes
    # every page's stream over one channel) and a burst of 1,000 at once.
    ("grpc.max_concurrent_streams", 100_000),
    ("grpc.max_receive_message_length", 16 * 1024 * 1024),
    ("grpc.max_send_message_length", 16 * 1024 * 1024),
    # Keepalive: find dead clients of long streams, and let clients ping us.
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.so_reuseport", 0),
]


class StartupError(Exception):
    """The service cannot start; the message says why in one line."""


def configure_logging(settings: JobServiceSettings) -> None:
    # Our format names no source file or line, so don't walk the stack for them on
    # every record: a few log lines per job are on the hot path.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler()
    handler.setFormatter(
        CachedTimeFormatter(
            "%(asctime)s %(levelname)s job-service["
            + settings.instance_id
            + "] %(name)s: %(message)s"
        )
    )
    logging.basicConfig(level=settings.log_level, handlers=[handler])


def _ensure_sqlite_folder(database_url: str) -> None:
    prefix = "sqlite+aiosqlite:///"
    if database_url.startswith(prefix):
        path = database_url[len(prefix) :]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)


async def migrate_only(settings: JobServiceSettings) -> None:
    configure_logging(settings)
    await prepare_database(settings)
    log.info("database at %s is migrated", settings.database_url)


class JobServiceRuntime:
    """One running JobService: start() brings every part up, stop() takes it down
    in the order that loses nothing. `serve` wraps it with signal handling; tests
    run it in-process on a loopback port."""

    def __init__(self, settings: JobServiceSettings) -> None:
        self.settings = settings
        self.port = 0
        self.store = SqlJobStore(
            settings.database_url,
            instance_id=settings.instance_id,
            enqueue_interval=settings.batch_interval,
        )
        self.hub = UpdateHub()
        self.gateway = StreamingAiGateway(settings.gateway)
        self.worker = Worker(
            self.store,
            self.gateway,
            self.hub.publish,
            WorkerConfig(
                concurrency=settings.workers,
                lease_seconds=settings.lease,
                poll_interval=settings.poll_interval,
                batch_interval=settings.batch_interval,
                deadlines=settings.deadlines(),
                backoff=BackoffPolicy(settings.retry_base_delay, settings.retry_max_delay),
            ),
        )
        self.app = JobApplication(
            self.store, self.hub, self.worker, settings.instance_id, settings.max_attempts
        )
        self.server = grpc.aio.server(options=SERVER_OPTIONS)
        job_service_pb2_grpc.add_JobServiceServicer_to_server(
            JobServiceServicer(
                self.app, EnqueueLimits(settings.max_text_chars), settings.max_attempts
            ),
            self.server,
        )
        self.health = health.aio.HealthServicer()  # type: ignore[attr-defined]
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            (
                SERVICE_NAME,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ),
            self.server,
        )
        self.listener: PgChangeListener | None = None

    @property
    def address(self) -> str:
        return f"{self.settings.listen.rpartition(':')[0]}:{self.port}"

    async def start(self) -> None:
        try:
            self.port = self.server.add_insecure_port(self.settings.listen)
        except RuntimeError as error:
            await self.store.close()
            raise StartupError(f"cannot listen on {self.settings.listen}: {error}") from None
        if self.settings.database_url.startswith("postgresql"):
            self.listener = PgChangeListener(
                self.settings.database_url,
                ignore_origin=self.settings.instance_id,
                on_change=self.app.on_remote_change,
                on_reconnect=self.app.on_notifications_reconnected,
            )
            await self.listener.start()
        await self.server.start()
        self.worker.start()
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    async def stop(self) -> None:
        log.info("shutting down: no new claims; in-flight jobs get %.0fs", self.settings.grace)
        await self.health.enter_graceful_shutdown()
        await self.worker.stop(self.settings.grace)
        # Streams never end by themselves; give unary calls a moment, then end the rest.
        await self.server.stop(1.0)
        if self.listener is not None:
            await self.listener.stop()
        await self.gateway.close()
        with contextlib.suppress(StorageUnavailableError):
            await self.store.close()
        log.info("job-service stopped")


async def prepare_database(settings: JobServiceSettings) -> None:
    try:
        _ensure_sqlite_folder(settings.database_url)
        await migrate(settings.database_url)
    except Exception as error:
        raise StartupError(
            f"cannot prepare the database at {_safe_url(settings.database_url)}: {error}"
        ) from None


async def serve(settings: JobServiceSettings) -> None:
    configure_logging(settings)
    await prepare_database(settings)
    runtime = JobServiceRuntime(settings)
    await runtime.start()
    # Everything made at start (modules, engines, the server) lives until the end:
    # keep it out of the garbage collector's full passes, which otherwise walk those
    # hundreds of thousands of objects again and again under load (a tenth of the CPU
    # of an Enqueue, measured with callgrind).
    gc.freeze()
    log.info(
        "job-service listening on %s (database %s, gateway %s, %d workers, event loop %s)",
        runtime.address,
        _safe_url(settings.database_url),
        settings.gateway,
        settings.workers,
        type(asyncio.get_running_loop()).__module__.split(".")[0],
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runtime.stop()


def _safe_url(url: str) -> str:
    """The database URL without a password, for logs."""
    scheme, sep, rest = url.partition("://")
    if "@" in rest and ":" in rest.split("@", 1)[0]:
        user = rest.split("@", 1)[0].split(":", 1)[0]
        return f"{scheme}{sep}{user}:***@{rest.split('@', 1)[1]}"
    return url
