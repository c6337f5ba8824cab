"""What the one implementation of the client calls: JobService's stub, awaitable.

:class:`~san_jobs.client.AsyncJobsClient` calls ``stub.Enqueue(request, timeout=...,
metadata=...)`` and awaits it, and iterates ``stub.StreamJobUpdates(...)`` with
``async for`` and ``cancel()``: the generated stub over a ``grpc.aio`` channel does
that. So do :class:`BlockingChannelStub`, the same calls over a blocking
``grpc.Channel`` that a caller gave :class:`~san_jobs.client.JobsClient` (a channel
with interceptors, ``grpc_testing``'s), and the in-memory service of
:mod:`san_jobs.client.testing`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc

SERVICE = pb.DESCRIPTOR.services_by_name["JobService"]
_END = object()


class BlockingChannelStub:
    """JobService's calls over a blocking channel, awaitable on an event loop.

    A call waits in a thread of this stub's own (a unary call's ``future()``, a
    stream's next message); cancelling the task cancels the call.
    """

    def __init__(self, channel: grpc.Channel) -> None:
        stub = pb_grpc.JobServiceStub(channel)
        self._channel = channel
        self._threads = ThreadPoolExecutor(thread_name_prefix="san-jobs-call")
        for method in SERVICE.methods:
            call = getattr(stub, method.name)
            if method.server_streaming:
                setattr(self, method.name, _StreamCall(call, self._threads))
            else:
                setattr(self, method.name, _UnaryCall(call, self._threads))

    def close(self) -> None:
        self._channel.close()
        self._threads.shutdown(wait=False, cancel_futures=True)


class _UnaryCall:
    def __init__(self, call: Any, threads: ThreadPoolExecutor) -> None:
        self._call = call
        self._threads = threads

    async def __call__(self, request: Any, **options: Any) -> Any:
        call = self._call.future(request, **options)  # timeout=, metadata=
        try:
            # The response, or the call's grpc.RpcError.
            return await asyncio.get_running_loop().run_in_executor(self._threads, call.result)
        except asyncio.CancelledError:
            call.cancel()
            raise


class _StreamCall:
    def __init__(self, call: Any, readers: ThreadPoolExecutor) -> None:
        self._call = call
        self._readers = readers

    def __call__(self, request: Any, **options: Any) -> _Responses:
        return _Responses(self._call(request, **options), self._readers)


class _Responses:
    """A blocking stream call read with ``async for``."""

    def __init__(self, call: Any, readers: ThreadPoolExecutor) -> None:
        self._call = call
        self._next: Callable[[], Any] = lambda: next(call, _END)
        self._readers = readers

    def __aiter__(self) -> _Responses:
        return self

    async def __anext__(self) -> Any:
        item = await asyncio.get_running_loop().run_in_executor(self._readers, self._next)
        if item is _END:
            raise StopAsyncIteration
        return item

    def cancel(self) -> bool:
        return bool(self._call.cancel())
