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

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"

# Unary calls take milliseconds; streams stay open for minutes or hours: the buckets
# reach an hour so a stream's life is not all in +Inf.
BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0, 3600.0,
)  # fmt: skip

_KINDS = ("unary_unary", "unary_stream", "stream_unary", "stream_stream")
_FACTORIES: dict[str, Callable[..., Handler]] = {
    "unary_unary": grpc.unary_unary_rpc_method_handler,
    "unary_stream": grpc.unary_stream_rpc_method_handler,
    "stream_unary": grpc.stream_unary_rpc_method_handler,
    "stream_stream": grpc.stream_stream_rpc_method_handler,
}


def method_label(full_method: str) -> str:
    """``/san.jobs.v1.JobService/Enqueue`` -> ``san.jobs.v1.JobService/Enqueue``."""
    return full_method.lstrip("/")


def ended_code(context: Context, error: BaseException | None) -> str:
    """The status code an RPC ended with, given what its handler raised (None: it
    returned). A code the handler set (abort, set_code) wins; a handler cancelled
    (the client went away, or its deadline passed) is CANCELLED or DEADLINE_EXCEEDED;
    any other exception is UNKNOWN, as grpc answers it."""
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code.name
    if error is None:
        return "OK"
    if isinstance(error, asyncio.CancelledError | GeneratorExit):
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:
            return "DEADLINE_EXCEEDED"
        return "CANCELLED"
    return "UNKNOWN"


class _MethodMetrics:
    """One method's pre-bound children: no label lookup per call but the code's."""

    __slots__ = ("_handled", "_method", "codes", "in_flight", "seconds")

    def __init__(self, metrics: GrpcServerMetrics, method: str) -> None:
        self._handled = metrics.handled
        self._method = method
        self.seconds = metrics.seconds.labels(method)
        self.in_flight = metrics.in_flight.labels(method)
        self.codes: dict[str, Any] = {}

    def ended(self, code: str, started: float) -> None:
        self.in_flight.dec()
        self.seconds.observe(time.perf_counter() - started)
        child = self.codes.get(code)
        if child is None:
            child = self.codes[code] = self._handled.labels(self._method, code)
        child.inc()


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
        wrapped = _wrap(handler, method)
        self._wrapped[full_method] = (handler, wrapped)
        return wrapped


def _wrap(handler: Handler, metrics: _MethodMetrics) -> Handler:
    """``handler`` with its behaviour counted; a kind of behaviour it cannot wrap (a
    synchronous one, which these services do not have) is left as it is."""
    for kind in _KINDS:
        behaviour = getattr(handler, kind)
        if behaviour is None:
            continue
        if inspect.isasyncgenfunction(behaviour):
            wrapped: Any = _counted_generator(behaviour, metrics)
        elif inspect.iscoroutinefunction(behaviour):
            wrapped = _counted_coroutine(behaviour, metrics)
        else:
            return handler
        return _FACTORIES[kind](
            wrapped,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    return handler


def _counted_coroutine(
    behaviour: Callable[[Any, Context], Awaitable[Any]], metrics: _MethodMetrics
) -> Callable[[Any, Context], Awaitable[Any]]:
    async def counted(request: Any, context: Context) -> Any:
        started = time.perf_counter()
        metrics.in_flight.inc()
        error: BaseException | None = None
        try:
            return await behaviour(request, context)
        except BaseException as raised:
            error = raised
            raise
        finally:
            metrics.ended(ended_code(context, error), started)

    return counted


def _counted_generator(
    behaviour: Callable[[Any, Context], AsyncIterator[Any]], metrics: _MethodMetrics
) -> Callable[[Any, Context], AsyncIterator[Any]]:
    async def counted(request: Any, context: Context) -> AsyncIterator[Any]:
        started = time.perf_counter()
        metrics.in_flight.inc()
        error: BaseException | None = None
        try:
            async for response in behaviour(request, context):
                yield response
        except BaseException as raised:
            error = raised
            raise
        finally:
            metrics.ended(ended_code(context, error), started)

    return counted
