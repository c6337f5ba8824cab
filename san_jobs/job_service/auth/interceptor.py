"""The gRPC server interceptor that authenticates every call and applies the role
table (roles.py) before any handler runs.

Health answers anyone. Under --auth token every other call needs `authorization:
Bearer TOKEN` naming a live token: without one it ends UNAUTHENTICATED; with a role
the table does not allow, PERMISSION_DENIED (both with an ErrorInfo in domain
jobs.san). With --tls-client-roles a client certificate not on the list is
PERMISSION_DENIED first; under --auth off a listed one is the caller, with the role
the list gives it (certificates.py). An allowed call runs with `current_caller` set,
which the servicer reads to scope a submitter to its own jobs, to write its name as
requested_by, and to count its streams.

A server stream opened with a token is checked again every cache period while it is
open, and ends UNAUTHENTICATED once the token is revoked or expired (stream_checks.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias

import grpc

from san_jobs.job_service.auth.bearer_tokens import TokenVerifier
from san_jobs.job_service.auth.certificates import CertificateAllowList, caller_certificate
from san_jobs.job_service.auth.roles import (
    ANY_ROLE_SERVICES,
    OPEN_SERVICES,
    Access,
    Caller,
    Role,
    access,
    current_caller,
    wants_every_job,
)
from san_jobs.job_service.auth.stream_checks import OpenStream, Recheck, StreamChecks
from san_jobs.job_service.domain.errors import PermissionDeniedError, UnauthenticatedError
from san_jobs.job_service.transport.errors import abort
from san_jobs.shared.client_identity import bearer_token

JOB_SERVICE = "san.jobs.v1.JobService"

# grpc-stubs makes it generic; grpc itself does not (so a string, for mypy only).
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
Context = grpc.aio.ServicerContext[Any, Any]


Check: TypeAlias = Callable[[Any, Context], Awaitable[Caller]]


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Authenticates each call with `verifier` (bearer tokens, --auth token) and/or
    `certificates` (--tls-client-roles), and checks the role table."""

    def __init__(
        self,
        verifier: TokenVerifier | None,
        certificates: CertificateAllowList | None = None,
    ) -> None:
        if verifier is None and certificates is None:
            raise ValueError("nothing to authenticate with: no tokens, no certificates")
        self._verifier = verifier
        self._certificates = certificates
        self._streams = (
            None
            if verifier is None
            else StreamChecks(
                lambda token: verifier.verify(token, fresh=True), verifier.cache_seconds
            )
        )

    @property
    def stream_checks(self) -> StreamChecks | None:
        """The open token streams checked again each period (None without tokens)."""
        return self._streams

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
        # A server stream with a token is checked again while it lasts (stream_checks.py).
        recheck = None
        if self._streams is not None and token and handler.unary_stream is not None:
            recheck = self._streams.for_token(token, rpc)
        return _guarded(handler, rpc, check, recheck)

    def _check(self, token: str | None, service: str, rpc: str) -> Check:
        """The check to run once the request is read: who calls, and may they."""

        async def check(request: Any, context: Context) -> Caller:
            name: str | None = None
            role: Role | None = None
            if self._certificates is not None:  # a certificate not on the list: refused
                name = caller_certificate(context)
                role = self._certificates.role_of(name, rpc)
            if self._verifier is not None:  # the token says who calls, not the certificate
                stored = await self._verifier.verify(token) if token else None
                if stored is None:
                    raise UnauthenticatedError()
                name, role = stored.name, Role(stored.role)
            assert name is not None and role is not None  # one of the two is configured
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
            return Caller(name, role, scope)

        return check


_END = object()  # the handler has no more responses
_REVOKED = object()  # the wait was cancelled by stream.end()


async def _next_or_end(responses: AsyncIterator[Any], stream: OpenStream) -> Any:
    """The handler's next response; _END when it has no more; _REVOKED when
    `stream.end()` cancelled the wait (the cancellation is taken back: the caller
    ends the call itself)."""
    stream.waiting = True
    try:
        return await anext(responses)
    except StopAsyncIteration:
        return _END
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if not stream.ended or task is None:
            raise  # a cancel of grpc's (client gone, server stopping): not ours
        task.uncancel()
        return _REVOKED
    finally:
        stream.waiting = False


def _guarded(handler: Handler, rpc: str, check: Check, recheck: Recheck | None) -> Handler:
    """`handler` with `check` run first: its Caller set for the handler, or the call
    ended with the status of what it raised. A server stream with `recheck` ends
    UNAUTHENTICATED once its token no longer verifies."""
    options: dict[str, Any] = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary is not None:
        unary: Any = handler.unary_unary

        async def unary_call(request: Any, context: Context) -> Any:
            try:
                caller = await check(request, context)
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
                caller = await check(request, context)
            except Exception as error:
                await abort(rpc, error, context)
                return
            current_caller.set(caller)
            responses = streaming(request, context)
            if recheck is None:
                async for response in responses:
                    yield response
                return
            # The loop of `async for`, written out: the wait for each response is
            # marked, so a revocation can cancel it (and only it).
            stream = recheck.open(caller.name)
            try:
                while not stream.ended:
                    response = await _next_or_end(responses, stream)
                    if response is _END:
                        return
                    if response is not _REVOKED:
                        yield response
            finally:
                recheck.close(stream)
            # Revoked or expired. The handler's claims (subscription, stream slot) go
            # now, not when it is collected.
            await responses.aclose()
            await abort(rpc, UnauthenticatedError(), context)

        return grpc.unary_stream_rpc_method_handler(streaming_call, **options)
    # Client streaming (server reflection): the request is not at hand; check first.
    return _guarded_request_streams(handler, rpc, check, options)


def _guarded_request_streams(
    handler: Handler, rpc: str, check: Check, options: dict[str, Any]
) -> Handler:
    if handler.stream_stream is not None:
        bidi: Any = handler.stream_stream

        async def bidi_call(requests: Any, context: Context) -> AsyncIterator[Any]:
            try:
                caller = await check(None, context)
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
            caller = await check(None, context)
        except Exception as error:
            await abort(rpc, error, context)
            raise AssertionError("unreachable") from None
        current_caller.set(caller)
        return await client(requests, context)

    return grpc.stream_unary_rpc_method_handler(client_call, **options)
