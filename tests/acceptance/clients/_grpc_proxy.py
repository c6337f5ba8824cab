"""A gRPC proxy in front of a real JobService that counts every Enqueue it passes on
and can make JobService "answer late": the call is forwarded (JobService commits), then
the answer is held until the caller's deadline has passed.

Only unary calls are forwarded (the outbox relay and san-web's page reads use no
other kind); bytes go through untouched, with the caller's metadata.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

ENQUEUE = "/san.jobs.v1.JobService/Enqueue"


@dataclass
class EnqueueSeen:
    """One Enqueue that went through the proxy, in arrival order."""

    request_id: str
    target_id: str
    answered_late: bool


@dataclass
class CountingProxy:
    """Listens on ``address``; forwards to ``upstream``. The first Enqueue of each
    request_id is answered after the caller's deadline while ``late_answers`` is on."""

    upstream: str
    late_answers: bool = False
    seen: list[EnqueueSeen] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._channel = grpc.insecure_channel(self.upstream)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        self._server.add_generic_rpc_handlers([_Forwarder(self)])
        port = self._server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{port}"
        self._server.start()

    def close(self) -> None:
        self._server.stop(0)
        self._channel.close()

    def deliveries(self) -> Counter[str]:
        """Enqueue calls per request_id."""
        with self._lock:
            return Counter(seen.request_id for seen in self.seen)

    def forward(self, method: str, request: bytes, context: grpc.ServicerContext) -> bytes:
        late = False
        if method == ENQUEUE:
            enqueue = pb.EnqueueRequest.FromString(request)
            with self._lock:
                first = all(seen.request_id != enqueue.request_id for seen in self.seen)
                late = self.late_answers and first
                self.seen.append(EnqueueSeen(enqueue.request_id, enqueue.target_id, late))
        call = self._channel.unary_unary(method, None, None)  # bytes in, bytes out
        try:
            answer: bytes = call(
                request,
                metadata=context.invocation_metadata(),
                timeout=context.time_remaining(),
            )
        except grpc.RpcError as error:
            context.abort(error.code(), error.details() or "")
        if late:
            # JobService has committed; the caller hears nothing before its deadline.
            time.sleep(max(0.0, context.time_remaining() or 0.0) + 0.2)
        return answer


class _Forwarder(grpc.GenericRpcHandler):  # type: ignore[type-arg]
    def __init__(self, proxy: CountingProxy) -> None:
        self._proxy = proxy

    def service(self, details: grpc.HandlerCallDetails) -> Any:
        method: str = details.method

        def behaviour(request: bytes, context: grpc.ServicerContext) -> bytes:
            return self._proxy.forward(method, request, context)

        return grpc.unary_unary_rpc_method_handler(behaviour)
