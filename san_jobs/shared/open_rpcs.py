"""Bounds for the RPCs a stranger can call: health (and reflection where it is open).

Health needs no token (load balancers and orchestrators probe it), so whoever reaches
a port can call it, and everything such a call makes the server hold must be bounded
as tightly as an authenticated call's, or tighter:

* the request's size, before it is decoded: `bounded_deserializer` gives a
  `RefusedRequest` (answered INVALID_ARGUMENT naming the field) for bytes over a few
  hundred, never a message holding megabytes. gRPC's own receive limit is per server
  (as large as the biggest Enqueue), so it cannot be the bound here;
* the streams it keeps open: each is admitted by a `StreamAdmission` (JobService's
  per-peer StreamGate, the gateway's `PeerStreamCap`) and refused with
  RESOURCE_EXHAUSTED past its bound.

Each service decides who a peer is (both count such streams by address: a health
probe has no identity).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import grpc
from google.protobuf.message import DecodeError, Message
from google.rpc import code_pb2  # ships no type stubs

from san_jobs.shared import memory_return, rich_status
from san_jobs.shared.field_violation import FieldViolation

REASON = "TOO_MANY_STREAMS"
# Peer strings come from grpc, not the caller, but keep error details short anyway.
_SUBJECT_CHARS = 200

M = TypeVar("M", bound=Message)
Context = grpc.aio.ServicerContext[Any, Any]


class StreamLease(Protocol):
    """One admitted stream's slot; `release()` frees it and may be called again."""

    def release(self) -> None: ...


class StreamRefused(Exception):
    """A stream over its bound; `status` is what the call ends with (RESOURCE_EXHAUSTED)."""

    def __init__(self, status: grpc.Status) -> None:
        super().__init__(status.details)
        self.status = status


# A lease for the stream of `context`, or StreamRefused.
StreamAdmission = Callable[[Context], StreamLease]


@dataclass(frozen=True, slots=True)
class RefusedRequest:
    """What `bounded_deserializer` gives for bytes that are not a request it accepts."""

    violation: FieldViolation

    def status(self) -> grpc.Status:
        """INVALID_ARGUMENT naming the field, with a BadRequest."""
        violation = self.violation
        return rich_status.to_grpc_status(
            rich_status.status(
                code_pb2.INVALID_ARGUMENT,
                f"{violation.field} {violation.description}",
                [rich_status.bad_request([violation])],
            )
        )


def bounded_deserializer(
    message_class: type[M], max_bytes: int, field: str
) -> Callable[[bytes], M | RefusedRequest]:
    """`message_class.FromString` for payloads of at most `max_bytes`; a RefusedRequest
    (naming `field`, the one that can make a request that large) for a longer one,
    before anything is decoded, and for bytes that are not a valid message. Never
    raises: gRPC would answer UNKNOWN and log a traceback."""
    name = message_class.DESCRIPTOR.full_name
    too_large = RefusedRequest(
        FieldViolation(field, f"is too long: a {name} is at most {max_bytes} bytes")
    )
    not_a_message = RefusedRequest(FieldViolation("request", f"is not a valid {name} message"))

    def deserialize(data: bytes) -> M | RefusedRequest:
        if len(data) > max_bytes:
            # gRPC has read all of it (its limit is the server's): give the memory back.
            memory_return.soon()
            return too_large
        try:
            return message_class.FromString(data)
        except DecodeError:
            return not_a_message

    return deserialize


async def refuse(context: Context, status: grpc.Status) -> None:
    """End the call with `status` (raises, as `abort_with_status` does)."""
    await context.abort_with_status(status)  # type: ignore[attr-defined]


class _CapLease:
    __slots__ = ("_cap", "_peer")

    def __init__(self, cap: PeerStreamCap, peer: str) -> None:
        self._cap: PeerStreamCap | None = cap
        self._peer = peer

    def release(self) -> None:
        cap, self._cap = self._cap, None
        if cap is not None:
            cap._release(self._peer)


class PeerStreamCap:
    """At most `per_peer` open streams per peer and `total` in all; the next is refused
    with RESOURCE_EXHAUSTED (ErrorInfo TOO_MANY_STREAMS in `domain`, a QuotaFailure).

    `peer_of` names a call's peer (its address). Single event loop, no awaits inside:
    no lock needed. Nothing is kept for a peer with no stream open.
    """

    def __init__(
        self, per_peer: int, total: int, domain: str, peer_of: Callable[[Context], str]
    ) -> None:
        self.per_peer = per_peer
        self.total = total
        self.domain = domain
        self._peer_of = peer_of
        self._open = 0
        self._by_peer: Counter[str] = Counter()

    def __call__(self, context: Context) -> StreamLease:
        """A StreamAdmission: a lease, or StreamRefused naming the bound hit."""
        peer = self._peer_of(context)
        if self._by_peer[peer] >= self.per_peer:
            raise self._refusal("perPeer", self.per_peer, f"peer:{peer}", "per peer")
        if self._open >= self.total:
            raise self._refusal("total", self.total, "service", "on this server")
        self._open += 1
        self._by_peer[peer] += 1
        return _CapLease(self, peer)

    @property
    def open_streams(self) -> int:
        """Streams admitted and not yet released."""
        return self._open

    def _release(self, peer: str) -> None:
        self._open -= 1
        self._by_peer[peer] -= 1
        if self._by_peer[peer] <= 0:
            del self._by_peer[peer]

    def _refusal(self, limit: str, maximum: int, subject: str, scope: str) -> StreamRefused:
        description = f"at most {maximum} open health and reflection streams {scope}"
        info = rich_status.error_info(
            REASON, self.domain, {"limit": limit, "maxStreams": str(maximum)}
        )
        quota = rich_status.quota_failure(subject[:_SUBJECT_CHARS], description)
        return StreamRefused(
            rich_status.to_grpc_status(
                rich_status.status(
                    code_pb2.RESOURCE_EXHAUSTED,
                    f"too many open streams: {description}; close one or retry later",
                    [info, quota],
                )
            )
        )


def admitted(admission: StreamAdmission, context: Context) -> StreamLease | StreamRefused:
    """The lease for `context`'s stream, or the refusal; the lease is also released
    when the call is done, however it ends (a generator that is never finalized
    frees its slot too)."""
    try:
        lease = admission(context)
    except StreamRefused as refusal:
        return refusal
    context.add_done_callback(lambda _call: lease.release())  # type: ignore[arg-type]
    return lease
