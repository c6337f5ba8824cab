"""Running code around every RPC a grpc.aio server answers, seeing how it ended: what
the metrics interceptor (san_jobs.shared.grpc_metrics) and the tracing interceptor
(san_jobs.shared.tracing) both need, written once.

`observed(handler, around)` is `handler` with each call run inside `around()`: a
context manager whose value is called once, at the end, with the status code the
RPC ended with (`ended_code`). Unary and streaming behaviours alike; a stream ends
when its last message is sent or it is cancelled.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Any, TypeAlias

import grpc

# grpc-stubs makes these generic; grpc itself does not (so strings, for mypy only).
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
# Called once when an RPC ends, with its code.
Ended: TypeAlias = Callable[[grpc.StatusCode], None]
Around: TypeAlias = Callable[[], AbstractContextManager[Ended]]

_KINDS = ("unary_unary", "unary_stream", "stream_unary", "stream_stream")
_FACTORIES: dict[str, Callable[..., Handler]] = {
    "unary_unary": grpc.unary_unary_rpc_method_handler,
    "unary_stream": grpc.unary_stream_rpc_method_handler,
    "stream_unary": grpc.stream_unary_rpc_method_handler,
    "stream_stream": grpc.stream_stream_rpc_method_handler,
}
_CODES_BY_VALUE = {code.value[0]: code for code in grpc.StatusCode}


def ended_code(context: Context, error: BaseException | None) -> grpc.StatusCode:
    """The status code an RPC ended with, given what its handler raised (None: it
    returned). A code the handler set (abort, set_code) wins; a handler cancelled
    (the client went away, or its deadline passed) is CANCELLED or DEADLINE_EXCEEDED;
    any other exception is UNKNOWN, as grpc answers it."""
    code: Any = context.code()
    if isinstance(code, grpc.StatusCode):
        return code
    if isinstance(code, int) and code in _CODES_BY_VALUE:
        return _CODES_BY_VALUE[code]
    if error is None:
        return grpc.StatusCode.OK
    if isinstance(error, asyncio.CancelledError | GeneratorExit):
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:
            return grpc.StatusCode.DEADLINE_EXCEEDED
        return grpc.StatusCode.CANCELLED
    return grpc.StatusCode.UNKNOWN


def observed(handler: Handler, around: Around) -> Handler:
    """`handler` with each call run inside `around()`; a kind of behaviour it cannot
    wrap (a synchronous one, which these services do not have) is left as it is."""
    for kind in _KINDS:
        behaviour = getattr(handler, kind)
        if behaviour is None:
            continue
        if inspect.isasyncgenfunction(behaviour):
            wrapped: Any = _observed_generator(behaviour, around)
        elif inspect.iscoroutinefunction(behaviour):
            wrapped = _observed_coroutine(behaviour, around)
        else:
            return handler
        return _FACTORIES[kind](
            wrapped,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    return handler


def _observed_coroutine(
    behaviour: Callable[[Any, Context], Awaitable[Any]], around: Around
) -> Callable[[Any, Context], Awaitable[Any]]:
    async def call(request: Any, context: Context) -> Any:
        with around() as ended:
            error: BaseException | None = None
            try:
                return await behaviour(request, context)
            except BaseException as raised:
                error = raised
                raise
            finally:
                ended(ended_code(context, error))

    return call


def _observed_generator(
    behaviour: Callable[[Any, Context], AsyncIterator[Any]], around: Around
) -> Callable[[Any, Context], AsyncIterator[Any]]:
    async def call(request: Any, context: Context) -> AsyncIterator[Any]:
        with around() as ended:
            error: BaseException | None = None
            try:
                async for response in behaviour(request, context):
                    yield response
            except BaseException as raised:
                error = raised
                raise
            finally:
                ended(ended_code(context, error))

    return call
