"""Requests whose bytes are not a valid message answer INVALID_ARGUMENT, not UNKNOWN.

gRPC answers a request it cannot deserialize with UNKNOWN and logs the traceback, for
every such request and whoever sent it. The gateway's handlers are registered here
with a deserializer that never raises: bad bytes (a broken wire format, a string that
is not UTF-8) become an `UndecodableRequest`, which the servicer turns into
InvalidRequest once it knows who called (a stranger still gets UNAUTHENTICATED): a
unary RPC ends with INVALID_ARGUMENT (ErrorInfo INVALID_REQUEST, BadRequest field
`request`); on StreamCalls it is a protocol violation that ends the stream, as any
other. Each is told in the log in one line, at most one such line per
LOG_INTERVAL_SECONDS (with the count since the last).

JobService does the same (san_jobs/job_service/transport/decoding.py, which also names the
field that is not UTF-8).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.message import DecodeError, Message

from san_jobs.ai_gateway.errors import FieldViolation, InvalidRequest
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2 as pb

logger = logging.getLogger("ai_gateway.decoding")

LOG_INTERVAL_SECONDS = 10.0
SERVICE = pb.DESCRIPTOR.services_by_name["AiGatewayService"]


@dataclass(frozen=True, slots=True)
class UndecodableRequest:
    """What the lenient deserializer gives for bytes that are not a `message` message."""

    message: str  # the full name of the type expected

    def error(self) -> InvalidRequest:
        """The error the call ends with."""
        return InvalidRequest(
            [
                FieldViolation(
                    "request",
                    f"is not a valid {self.message} message "
                    "(a broken wire format, or a string that is not UTF-8)",
                )
            ]
        )


class _RateLimitedLog:
    """One warning line per LOG_INTERVAL_SECONDS at most, with the count since the last."""

    def __init__(self, interval: float) -> None:
        self._interval = interval
        self._last = -interval
        self._unlogged = 0

    def note(self, method: str, caller: str) -> None:
        self._unlogged += 1
        now = time.monotonic()
        if now - self._last < self._interval:
            return
        logger.warning(
            "undecodable %s request from %s refused (INVALID_ARGUMENT); %d such in the last %.0f s",
            method,
            caller,
            self._unlogged,
            min(now - self._last, self._interval),
        )
        self._last = now
        self._unlogged = 0


_LOG = _RateLimitedLog(LOG_INTERVAL_SECONDS)


def refusal(request: UndecodableRequest, method: str, caller: str) -> InvalidRequest:
    """The error for an undecodable request of `method` from `caller`, noted in the log
    (rate-limited)."""
    _LOG.note(method, caller)
    return request.error()


def lenient_deserializer(
    message_class: type[Message],
) -> Callable[[bytes], Message | UndecodableRequest]:
    """`message_class.FromString`, giving an UndecodableRequest instead of raising."""
    undecodable = UndecodableRequest(message_class.DESCRIPTOR.full_name)

    def deserialize(data: bytes) -> Message | UndecodableRequest:
        try:
            return message_class.FromString(data)
        except DecodeError:
            return undecodable

    return deserialize


def add_servicer(servicer: object, server: grpc.aio.Server) -> None:
    """Register `servicer`'s AiGatewayService methods on `server` as the generated
    add_AiGatewayServiceServicer_to_server does, with lenient deserializers."""
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for method in SERVICE.methods:
        request_class = message_factory.GetMessageClass(method.input_type)
        response_class = message_factory.GetMessageClass(method.output_type)
        options: dict[str, Any] = {
            "request_deserializer": lenient_deserializer(request_class),
            "response_serializer": response_class.SerializeToString,
        }
        behavior = getattr(servicer, method.name)
        if method.client_streaming and method.server_streaming:
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(behavior, **options)
        elif not method.client_streaming and not method.server_streaming:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(behavior, **options)
        else:
            raise ValueError(f"{method.full_name}: this kind of RPC is not registered here")
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE.full_name, handlers),)
    )
    server.add_registered_method_handlers(SERVICE.full_name, handlers)  # type: ignore[attr-defined]
