"""Who a peer is, and the counting of open streams
(san_jobs/job_service/transport/stream_limits.py)."""

from __future__ import annotations

import pytest
from google.rpc import code_pb2, error_details_pb2, status_pb2

from san_jobs.job_service.transport.stream_limits import (
    StreamGate,
    StreamLimits,
    StreamRefusedError,
)
from san_jobs.shared.client_identity import peer_host

LIMITS = StreamLimits(
    max_streams=5,
    max_streams_per_peer=3,
    max_streams_per_connection=2,
    max_feeds=2,
    max_feeds_per_peer=1,
)


@pytest.mark.parametrize(
    ("peer", "host"),
    [
        ("ipv4:127.0.0.1:54321", "127.0.0.1"),
        ("ipv6:%5B::1%5D:54321", "::1"),
        ("ipv6:[::1]:54321", "::1"),
        ("ipv6:%5B2001:DB8::7%5D:1", "2001:db8::7"),
        ("ipv6:%5Bfe80::1%25eth0%5D:1", "fe80::1"),
        ("ipv6:%5B::ffff:10.0.0.7%5D:443", "10.0.0.7"),
        ("unix:", "unix"),
        ("unix:/run/jobs.sock", "unix"),
        ("unix-abstract:jobs", "unix"),
        ("ipv4:not-an-address:1", "not-an-address"),
        ("weird", "weird"),
    ],
)
def test_the_peer_is_the_host_part_in_one_spelling(peer: str, host: str) -> None:
    assert peer_host(peer) == host


def refusal(gate: StreamGate, peer: str, connection: str, *, feed: bool = False) -> str:
    with pytest.raises(StreamRefusedError) as caught:
        gate.admit(peer, connection, feed=feed)
    return caught.value.limit


def test_each_bound_is_checked_and_named() -> None:
    gate = StreamGate(LIMITS)
    gate.admit("a", "a:1", feed=False)
    gate.admit("a", "a:1", feed=True)
    assert refusal(gate, "a", "a:1") == "max-streams-per-connection"
    assert refusal(gate, "a", "a:2", feed=True) == "max-feeds-per-peer"
    gate.admit("a", "a:2", feed=False)
    assert refusal(gate, "a", "a:3") == "max-streams-per-peer"
    gate.admit("b", "b:1", feed=True)
    assert refusal(gate, "c", "c:1", feed=True) == "max-feeds"
    gate.admit("c", "c:1", feed=False)
    assert refusal(gate, "d", "d:1") == "max-streams"
    assert (gate.open_streams, gate.open_feeds, gate.open_for_peer("a")) == (5, 2, 3)


def test_a_lease_gives_its_slot_back_once() -> None:
    gate = StreamGate(LIMITS)
    feed = gate.admit("a", "a:1", feed=True)
    other = gate.admit("a", "a:1", feed=False)
    feed.release()
    feed.release()  # the servicer's finally and grpc's done-callback both call it
    assert (gate.open_streams, gate.open_feeds, gate.open_for_peer("a")) == (1, 0, 1)
    gate.admit("a", "a:2", feed=True)
    other.release()
    assert (gate.open_streams, gate.open_for_peer("a")) == (1, 1)


def test_counts_of_gone_peers_are_not_kept() -> None:
    gate = StreamGate(LIMITS)
    for index in range(100):
        gate.admit(f"peer-{index}", f"conn-{index}", feed=True).release()
    assert not gate._by_peer and not gate._by_connection and not gate._feeds_by_peer


def test_the_refusal_is_resource_exhausted_with_a_reason_and_a_quota_failure() -> None:
    error = StreamRefusedError("max-streams-per-peer", 3, "peer:" + "x" * 10_000, "streams")
    status = error.to_status()
    assert status.code.name == "RESOURCE_EXHAUSTED"
    details = status_pb2.Status.FromString(
        dict(status.trailing_metadata)["grpc-status-details-bin"]
    )
    assert details.code == code_pb2.RESOURCE_EXHAUSTED
    info, quota = error_details_pb2.ErrorInfo(), error_details_pb2.QuotaFailure()
    assert details.details[0].Unpack(info) and details.details[1].Unpack(quota)
    assert (info.domain, info.reason) == ("jobs.san", "TOO_MANY_STREAMS")
    assert dict(info.metadata) == {"limit": "max-streams-per-peer", "maxStreams": "3"}
    assert len(quota.violations[0].subject) <= 200
    assert "--max-streams-per-peer" in quota.violations[0].description
