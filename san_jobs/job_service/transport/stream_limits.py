"""Bounds on open StreamJobUpdates streams: in total, per caller, per connection, and
smaller bounds for live feeds.

"Per peer" (the flags' word) means per caller: the authenticated identity when there
is one (a token's name under --auth token, a client certificate's name under mutual
TLS), so co-tenants behind one address (one NAT, one machine) have a bound each and
one caller cannot use up another's; the client's address only when the call carries
no identity (--auth off without client certificates). See `peer_key`.

Every open stream holds a subscription (memory, a slot in the HTTP/2 connection) and
every change is offered to it; a live feed (no `job_ids`) is offered *every* change,
so a few thousand feeds turn one Enqueue into thousands of messages and slow
everyone. A stream over a bound is refused alone with RESOURCE_EXHAUSTED, ErrorInfo
reason TOO_MANY_STREAMS naming the limit, and a QuotaFailure; streams already open
and unary calls are untouched.

Job-id streams get generous bounds because the web backend multiplexes every open
job page's stream over one channel (one connection, one peer); feeds get small ones.

The count is taken by `StreamGate.admit` and given back by `StreamLease.release`,
which is idempotent: the servicer calls it from its `finally` and from the call's
done-callback, so a stream that ends in any way (client cancel, error, deadline,
server stop, a generator never finalized) frees its slot.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import grpc
from google.rpc import code_pb2  # ships no type stubs

from san_jobs.job_service.auth.certificates import caller_certificate
from san_jobs.job_service.auth.roles import current_caller
from san_jobs.job_service.transport.errors import DOMAIN
from san_jobs.shared import rich_status
from san_jobs.shared.client_identity import peer_host

REASON = "TOO_MANY_STREAMS"

# Peer strings come from grpc, not the caller, but a unix socket path can be long:
# keep error details short whatever they hold.
SUBJECT_CHARS = 200
# How a per-caller key made from an identity starts: an address never does, so a token
# named like an address ("127.0.0.1") does not share that address's bound.
IDENTITY_PREFIX = "caller:"


@dataclass(frozen=True)
class StreamLimits:
    """How many StreamJobUpdates streams may be open at once (settings hold the defaults)."""

    max_streams: int
    max_streams_per_peer: int
    max_streams_per_connection: int
    max_feeds: int
    max_feeds_per_peer: int


def peer_key(context: grpc.aio.ServicerContext[Any, Any]) -> str:
    """Who the caller is, for per-caller ("per peer") limits: "caller:NAME" for an
    authenticated caller (the token's or the listed certificate's name the
    interceptor set, else the name of the client certificate mutual TLS verified),
    else the client's address (peer_host). The one place that decides it."""
    caller = current_caller.get()
    if caller is not None:
        return IDENTITY_PREFIX + caller.name
    certificate = caller_certificate(context)
    if certificate is not None:
        return IDENTITY_PREFIX + certificate
    return peer_host(context.peer())


def _subject(peer: str) -> str:
    """A per-caller key as a QuotaFailure subject: "caller:NAME" or "peer:ADDRESS"."""
    return peer if peer.startswith(IDENTITY_PREFIX) else f"peer:{peer}"


def _per(peer: str) -> str:
    return "caller" if peer.startswith(IDENTITY_PREFIX) else "peer"


def connection_key(context: grpc.aio.ServicerContext[Any, Any]) -> str:
    """The caller's connection: grpc's whole peer string (address and port)."""
    return context.peer()


class StreamRefusedError(Exception):
    """A new stream would pass `limit` (the flag's name without dashes)."""

    def __init__(self, limit: str, maximum: int, subject: str, what: str) -> None:
        self.limit = limit
        self.maximum = maximum
        self.subject = subject[:SUBJECT_CHARS]
        self.description = f"at most {maximum} open {what} (--{limit})"
        super().__init__(f"too many open streams: {self.description}; close one or retry later")

    def to_status(self) -> grpc.Status:
        """RESOURCE_EXHAUSTED with ErrorInfo (jobs.san, TOO_MANY_STREAMS) and a QuotaFailure."""
        info = rich_status.error_info(
            REASON, DOMAIN, {"limit": self.limit, "maxStreams": str(self.maximum)}
        )
        quota = rich_status.quota_failure(self.subject, self.description)
        return rich_status.to_grpc_status(
            rich_status.status(code_pb2.RESOURCE_EXHAUSTED, str(self), [info, quota])
        )


class StreamLease:
    """One admitted stream's slot; `release()` gives it back, once, however often called."""

    __slots__ = ("_connection", "_feed", "_gate", "_peer")

    def __init__(self, gate: StreamGate, peer: str, connection: str, feed: bool) -> None:
        self._gate: StreamGate | None = gate
        self._peer = peer
        self._connection = connection
        self._feed = feed

    def release(self) -> None:
        """Free the slot (idempotent)."""
        gate, self._gate = self._gate, None
        if gate is not None:
            gate._release(self._peer, self._connection, self._feed)


def _take(counts: Counter[str], key: str) -> None:
    counts[key] -= 1
    if counts[key] <= 0:
        del counts[key]  # no memory kept for peers and connections that are gone


class StreamGate:
    """Counts open streams and admits a new one only while every bound holds.

    Single event loop, no awaits inside: checks and counts need no lock.
    """

    def __init__(self, limits: StreamLimits) -> None:
        self.limits = limits
        self._streams = 0
        self._feeds = 0
        self._by_peer: Counter[str] = Counter()
        self._by_connection: Counter[str] = Counter()
        self._feeds_by_peer: Counter[str] = Counter()

    def admit(self, peer: str, connection: str, *, feed: bool) -> StreamLease:
        """A lease on one more stream, or StreamRefusedError naming the first bound hit."""
        limits = self.limits
        # Narrowest scope first, so the error names what the caller can fix.
        if self._by_connection[connection] >= limits.max_streams_per_connection:
            raise StreamRefusedError(
                "max-streams-per-connection",
                limits.max_streams_per_connection,
                f"connection:{connection}",
                "streams per connection",
            )
        if self._by_peer[peer] >= limits.max_streams_per_peer:
            raise StreamRefusedError(
                "max-streams-per-peer",
                limits.max_streams_per_peer,
                _subject(peer),
                f"streams per {_per(peer)}",
            )
        if feed and self._feeds_by_peer[peer] >= limits.max_feeds_per_peer:
            raise StreamRefusedError(
                "max-feeds-per-peer",
                limits.max_feeds_per_peer,
                _subject(peer),
                f"live feeds (streams without job_ids) per {_per(peer)}",
            )
        if feed and self._feeds >= limits.max_feeds:
            raise StreamRefusedError(
                "max-feeds", limits.max_feeds, "service", "live feeds on this instance"
            )
        if self._streams >= limits.max_streams:
            raise StreamRefusedError(
                "max-streams", limits.max_streams, "service", "streams on this instance"
            )
        self._streams += 1
        self._by_peer[peer] += 1
        self._by_connection[connection] += 1
        if feed:
            self._feeds += 1
            self._feeds_by_peer[peer] += 1
        return StreamLease(self, peer, connection, feed)

    def _release(self, peer: str, connection: str, feed: bool) -> None:
        self._streams -= 1
        _take(self._by_peer, peer)
        _take(self._by_connection, connection)
        if feed:
            self._feeds -= 1
            _take(self._feeds_by_peer, peer)

    @property
    def open_streams(self) -> int:
        """Streams admitted and not yet released (feeds included)."""
        return self._streams

    @property
    def open_feeds(self) -> int:
        """Live feeds admitted and not yet released."""
        return self._feeds

    def open_for_peer(self, peer: str) -> int:
        """Streams open for one per-caller key (peer_key: "caller:NAME" or an address)."""
        return self._by_peer.get(peer, 0)
