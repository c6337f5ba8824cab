"""grpc.health.v1.Health for both services, bounded against callers without a token.

The semantics of grpc's own servicer (grpc_health.v1.health.aio.HealthServicer):
`Check` answers a known name's status and NOT_FOUND for another; `Watch` sends the
name's status (SERVICE_UNKNOWN for a name never set) and again each time it changes,
until the caller leaves; `set` changes a status; `enter_graceful_shutdown` makes every
name NOT_SERVING for good.

What differs is what a watcher costs. grpc's servicer keeps a Condition per watched
name (unknown names included) and accepts a name as large as the server's message
limit: 1,000 hostile Watch calls with megabyte names grew job-service by hundreds of
MiB that stayed after they were cancelled. Here:

* a request over MAX_REQUEST_BYTES is refused (INVALID_ARGUMENT, field `service`)
  before it is decoded, so a name never exceeds MAX_SERVICE_NAME_BYTES;
* every watcher waits on one shared event, whatever its name: a watcher holds its
  coroutine, its name and one waiter, nothing per name is kept;
* each Watch stream is admitted by the service's StreamAdmission (a per-peer bound)
  and refused with RESOURCE_EXHAUSTED beyond it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, TypeAlias

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from san_jobs.shared.open_rpcs import (
    Context,
    RefusedRequest,
    StreamAdmission,
    StreamRefused,
    admitted,
    bounded_deserializer,
    refuse,
)

SERVICE_NAME = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
# Real service names are a few dozen bytes ("san.aigateway.v1.AiGatewayService").
MAX_SERVICE_NAME_BYTES = 256
# The name plus its field's tag and length (two bytes of varint for up to 16 KiB).
MAX_REQUEST_BYTES = MAX_SERVICE_NAME_BYTES + 3

Status: TypeAlias = health_pb2.HealthCheckResponse.ServingStatus
SERVING: Status = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING: Status = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN: Status = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN

_decode = bounded_deserializer(health_pb2.HealthCheckRequest, MAX_REQUEST_BYTES, "service")


class HealthServicer(health_pb2_grpc.HealthServicer):  # type: ignore[misc]  # no stubs
    """The health service; register it with `add_to_server` (its bounded decoding)."""

    def __init__(self, admission: StreamAdmission) -> None:
        """`admission`: admits each Watch stream (StreamRefused beyond the service's bound)."""
        self._admission = admission
        self._statuses: dict[str, Status] = {"": SERVING}
        # Set, then replaced by a fresh one, at every change: every watcher wakes.
        self._changed = asyncio.Event()
        self._shutting_down = False

    def add_to_server(self, server: grpc.aio.Server) -> None:
        """Serve grpc.health.v1.Health on `server`, requests bounded before decoding."""
        serialize = health_pb2.HealthCheckResponse.SerializeToString
        handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
            "Check": grpc.unary_unary_rpc_method_handler(
                self.Check, request_deserializer=_decode, response_serializer=serialize
            ),
            "Watch": grpc.unary_stream_rpc_method_handler(
                self.Watch, request_deserializer=_decode, response_serializer=serialize
            ),
        }
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),)
        )
        server.add_registered_method_handlers(SERVICE_NAME, handlers)  # type: ignore[attr-defined]

    def status(self, service: str) -> Status | None:
        """The status `service` has (None: never set)."""
        return self._statuses.get(service)

    async def Check(
        self, request: health_pb2.HealthCheckRequest | RefusedRequest, context: Context
    ) -> health_pb2.HealthCheckResponse:
        """The status of `request.service`; NOT_FOUND for a name never set."""
        if isinstance(request, RefusedRequest):
            await refuse(context, request.status())
            raise AssertionError("unreachable: refuse raises")
        status = self._statuses.get(request.service)
        if status is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, "unknown service")
        return health_pb2.HealthCheckResponse(status=status)

    async def Watch(
        self, request: health_pb2.HealthCheckRequest | RefusedRequest, context: Context
    ) -> AsyncIterator[health_pb2.HealthCheckResponse]:
        """The status of `request.service` now and at each change, until the caller leaves."""
        if isinstance(request, RefusedRequest):
            await refuse(context, request.status())
            return
        lease = admitted(self._admission, context)
        if isinstance(lease, StreamRefused):
            await refuse(context, lease.status)
            return
        try:
            sent: Status | None = None
            while True:
                changed = self._changed
                status = self._statuses.get(request.service, SERVICE_UNKNOWN)
                # A change and back before this watcher woke is not sent: the watcher
                # wants the latest status, not every one (as grpc's servicer).
                if status != sent:
                    yield health_pb2.HealthCheckResponse(status=status)
                    sent = status
                await changed.wait()
        finally:
            lease.release()

    async def set(self, service: str, status: Status) -> None:
        """Give `service` `status` (ignored once shutting down); watchers are told."""
        if not self._shutting_down:
            self._set(service, status)

    async def enter_graceful_shutdown(self) -> None:
        """Every name NOT_SERVING, for good: later `set` calls are ignored."""
        if self._shutting_down:
            return
        self._shutting_down = True
        for service in self._statuses:
            self._statuses[service] = NOT_SERVING
        self._wake_watchers()

    def _set(self, service: str, status: Status) -> None:
        self._statuses[service] = status
        self._wake_watchers()

    def _wake_watchers(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
