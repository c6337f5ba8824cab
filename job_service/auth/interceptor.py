"""The gRPC server interceptor that authenticates every call and applies the role
table (roles.py) before any handler runs.

Health answers anyone. Every other call needs `authorization: Bearer TOKEN` naming a
live token: without one it ends UNAUTHENTICATED; with a role the table does not allow,
PERMISSION_DENIED (both with an ErrorInfo in domain jobs.san). An allowed call runs
with `current_caller` set, which the servicer reads to scope a submitter to its own
jobs and to write its name as requested_by.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias

import grpc

from job_service.auth.roles import (
    ANY_ROLE_SERVICES,
    OPEN_SERVICES,
    Access,
    Caller,
    Role,
    access,
    current_caller,
    wants_every_job,
)
from job_service.auth.tokens import TokenVerifier
from job_service.domain.errors import PermissionDeniedError, UnauthenticatedError
from job_service.transport.errors import abort

JOB_SERVICE = "san.jobs.v1.JobService"
_BEARER = "bearer "

# grpc-stubs makes it generic; grpc itself does not (so a string, for mypy only).
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
Context = grpc.aio.ServicerContext[Any, Any]


def bearer_token(metadata: Any) -> str | None:
    """The token of the first `authorization: Bearer ...` header, or None."""
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str):
            if value[: len(_BEARER)].lower() == _BEARER:
                return value[len(_BEARER) :].strip()
            return None
    return None


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Authenticates each call with `verifier` and checks the role table."""

    def __init__(self, verifier: TokenVerifier) -> None:
        self._verifier = verifier

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler:
        handler = await continuation(handler_call_details)
        service, _, rpc = handler_call_details.method.lstrip("/").partition("/")
        if handler is None or service in OPEN_SERVICES:
            return handler
        token = bearer_token(handler_call_details.invocation_metadata)
        check = self._check(token, service, rpc)
        return _guarded(handler, rpc, check)

    def _check(
        self, token: str | None, service: str, rpc: str
    ) -> Callable[[Any], Awaitable[Caller]]:
        """The check to run once the request is read: who calls, and may they."""

        async def check(request: Any) -> Caller:
            stored = await self._verifier.verify(token) if token else None
            if stored is None:
                raise UnauthenticatedError()
            role = Role(stored.role)
            if service == JOB_SERVICE:
                scope = access(rpc, role)
            elif service in ANY_ROLE_SERVICES:
                scope = Access.ALL
            else:
                scope = Access.NONE  # a service nobody gave a rule: closed
            if scope is Access.NONE:
                raise PermissionDeniedError(rpc, role.value)
            if scope is Access.OWN and wants_every_job(rpc, request):
                raise PermissionDeniedError(rpc, role.value, "only jobs named by id")
            return Caller(stored.name, role, scope)

        return check


def _guarded(handler: Handler, rpc: str, check: Callable[[Any], Awaitable[Caller]]) -> Handler:
    """`handler` with `check` run first: its Caller set for the handler, or the call
    ended with the status of what it raised."""
    options: dict[str, Any] = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary is not None:
        unary: Any = handler.unary_unary

        async def unary_call(request: Any, context: Context) -> Any:
            try:
                caller = await check(request)
            except Exception as error:
                await abort(rpc, error, context)
                raise AssertionError("unreachable") from None
            current_caller.set(caller)
            return await unary(request, context)

        return grpc.unary_unary_rpc_method_handler(unary_call, **options)
    if handler.unary_stream is not None:
        streaming: Any = handler.unary_stream

        async def streaming_call(request: Any, context: Context) -> AsyncIterator[Any]:
            try:
                caller = await check(request)
            except Exception as error:
                await abort(rpc, error, context)
                return
            current_caller.set(caller)
            async for response in streaming(request, context):
                yield response

        return grpc.unary_stream_rpc_method_handler(streaming_call, **options)
    # Client streaming (server reflection): the request is not at hand; check first.
    return _guarded_request_streams(handler, rpc, check, options)


def _guarded_request_streams(
    handler: Handler,
    rpc: str,
    check: Callable[[Any], Awaitable[Caller]],
    options: dict[str, Any],
) -> Handler:
    if handler.stream_stream is not None:
        bidi: Any = handler.stream_stream

        async def bidi_call(requests: Any, context: Context) -> AsyncIterator[Any]:
            try:
                caller = await check(None)
            except Exception as error:
                await abort(rpc, error, context)
                return
            current_caller.set(caller)
            async for response in bidi(requests, context):
                yield response

        return grpc.stream_stream_rpc_method_handler(bidi_call, **options)
    client: Any = handler.stream_unary

    async def client_call(requests: Any, context: Context) -> Any:
        try:
            caller = await check(None)
        except Exception as error:
            await abort(rpc, error, context)
            raise AssertionError("unreachable") from None
        current_caller.set(caller)
        return await client(requests, context)

    return grpc.stream_unary_rpc_method_handler(client_call, **options)
