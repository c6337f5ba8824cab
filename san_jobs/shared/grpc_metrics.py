"""A grpc.aio server interceptor that counts every RPC by method and status code,
times it, and keeps a gauge of the RPCs in flight (open streams included).

Unary and streaming RPCs alike: a stream (StreamJobUpdates, StreamCalls) is counted
once, when it ends, with the code it ended with and how long it was open; while it
is open it is in the in-flight gauge. Only methods the server serves are seen (grpc
answers an unknown one UNIMPLEMENTED before any interceptor's handler runs), so the
`method` label takes the values of the services' descriptors and nothing a caller
invents.

Metrics (``<prefix>`` is the service's: ``san_jobs``, ``san_aigateway``):

- ``<prefix>_grpc_server_handled_total{method,code}``
- ``<prefix>_grpc_server_handling_seconds{method}`` (histogram)
- ``<prefix>_grpc_server_in_flight{method}`` (gauge)
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from san_jobs.shared.rpc_observers import Ended, Handler, observed

# Unary calls take milliseconds; streams stay open for minutes or hours: the buckets
# reach an hour so a stream's life is not all in +Inf.
BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0, 3600.0,
)  # fmt: skip


def method_label(full_method: str) -> str:
    """``/san.jobs.v1.JobService/Enqueue`` -> ``san.jobs.v1.JobService/Enqueue``."""
    return full_method.lstrip("/")


class _MethodMetrics:
    """One method's pre-bound children: no label lookup per call but the code's."""

    __slots__ = ("_handled", "_method", "codes", "in_flight", "seconds")

    def __init__(self, metrics: GrpcServerMetrics, method: str) -> None:
        self._handled = metrics.handled
        self._method = method
        self.seconds = metrics.seconds.labels(method)
        self.in_flight = metrics.in_flight.labels(method)
        self.codes: dict[str, Any] = {}

    def around(self) -> _Timed:
        return _Timed(self)

    def ended(self, code: str, started: float) -> None:
        self.in_flight.dec()
        self.seconds.observe(time.perf_counter() - started)
        child = self.codes.get(code)
        if child is None:
            child = self.codes[code] = self._handled.labels(self._method, code)
        child.inc()


class _Timed:
    """One call: in the in-flight gauge from __enter__ until it ends."""

    __slots__ = ("_method", "_started")

    def __init__(self, method: _MethodMetrics) -> None:
        self._method = method
        self._started = 0.0

    def __enter__(self) -> Ended:
        self._started = time.perf_counter()
        self._method.in_flight.inc()
        return self._ended

    def _ended(self, code: grpc.StatusCode) -> None:
        self._method.ended(code.name, self._started)

    def __exit__(self, *exc_info: object) -> None:
        return None


class GrpcServerMetrics(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Counts, times and gauges every RPC of the server it intercepts. Put it first
    in the server's interceptors, so calls refused by later ones (authentication)
    are counted too."""

    def __init__(self, registry: CollectorRegistry, prefix: str) -> None:
        self.handled = Counter(
            f"{prefix}_grpc_server_handled_total",
            "RPCs ended, by method and gRPC status code (a stream counts when it ends)",
            ["method", "code"],
            registry=registry,
        )
        self.seconds = Histogram(
            f"{prefix}_grpc_server_handling_seconds",
            "Time from the start of an RPC to its end, by method (a stream: how long it was open)",
            ["method"],
            buckets=BUCKETS,
            registry=registry,
        )
        self.in_flight = Gauge(
            f"{prefix}_grpc_server_in_flight",
            "RPCs running now, by method (open streams included)",
            ["method"],
            registry=registry,
        )
        self._methods: dict[str, _MethodMetrics] = {}
        # The wrapped handler of each method, while continuation keeps answering with
        # the same handler object (no interceptor before us making one per call).
        self._wrapped: dict[str, tuple[Handler, Handler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler:
        handler = await continuation(handler_call_details)
        if handler is None:  # an unknown method: grpc answers UNIMPLEMENTED
            return handler
        full_method: str = handler_call_details.method
        cached = self._wrapped.get(full_method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        method = self._methods.get(full_method)
        if method is None:
            method = self._methods[full_method] = _MethodMetrics(self, method_label(full_method))
        wrapped = observed(handler, method.around)
        self._wrapped[full_method] = (handler, wrapped)
        return wrapped
