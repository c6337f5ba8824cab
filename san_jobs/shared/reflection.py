"""Server reflection (grpc.reflection.v1alpha), bounded as san_jobs.shared.open_rpcs says.

grpc's reflection servicer answers each request with the request echoed in it
(`original_request`), and gRPC lets a request be as large as the server's message
limit: a stream of megabyte file names held two copies of each. Here every request
over MAX_REQUEST_BYTES (a symbol or file name is at most a few hundred bytes) ends
the stream with INVALID_ARGUMENT before it is decoded, and each stream is admitted
by the service's StreamAdmission (RESOURCE_EXHAUSTED beyond its bound). What the
answers say is grpc's servicer's, unchanged.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any

import grpc
from grpc_reflection.v1alpha import _async as reflection_aio
from grpc_reflection.v1alpha import reflection, reflection_pb2

from san_jobs.shared.open_rpcs import (
    Context,
    RefusedRequest,
    StreamAdmission,
    StreamRefused,
    admitted,
    bounded_deserializer,
    refuse,
)

SERVICE_NAME: str = reflection.SERVICE_NAME
MAX_REQUEST_BYTES = 4096

_decode = bounded_deserializer(reflection_pb2.ServerReflectionRequest, MAX_REQUEST_BYTES, "request")


async def _checked(
    requests: AsyncIterator[reflection_pb2.ServerReflectionRequest | RefusedRequest],
    context: Context,
) -> AsyncIterator[reflection_pb2.ServerReflectionRequest]:
    async for request in requests:
        if isinstance(request, RefusedRequest):
            await refuse(context, request.status())
            return
        yield request


def enable_server_reflection(
    service_names: Iterable[str], server: grpc.aio.Server, admission: StreamAdmission
) -> None:
    """Serve reflection for `service_names` (list SERVICE_NAME too) on `server`."""
    servicer = reflection_aio.ReflectionServicer(tuple(service_names))

    async def info(
        requests: AsyncIterator[reflection_pb2.ServerReflectionRequest | RefusedRequest],
        context: Context,
    ) -> AsyncIterator[reflection_pb2.ServerReflectionResponse]:
        lease = admitted(admission, context)
        if isinstance(lease, StreamRefused):
            await refuse(context, lease.status)
            return
        try:
            async for response in servicer.ServerReflectionInfo(
                _checked(requests, context), context
            ):
                yield response
        finally:
            lease.release()

    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
            info,
            request_deserializer=_decode,
            response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
        )
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)  # type: ignore[attr-defined]
