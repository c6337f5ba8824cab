"""Notification payloads: grouped by status, below PostgreSQL's size limit."""

from __future__ import annotations

import uuid

from job_service.storage.notify import MAX_PAYLOAD_BYTES, build_payloads, parse_payload


def test_payloads_group_by_status_and_round_trip() -> None:
    payloads = build_payloads("inst-1", [("a", "PENDING"), ("b", "FAILED"), ("c", "PENDING")])
    assert payloads == ["inst-1|PENDING|a,c", "inst-1|FAILED|b"]
    assert parse_payload(payloads[0]) == ("inst-1", "PENDING", ["a", "c"])


def test_many_ids_are_cut_below_the_limit_and_none_is_lost() -> None:
    ids = [str(uuid.uuid4()) for _ in range(1000)]
    payloads = build_payloads("inst-1", [(i, "PENDING") for i in ids])
    assert len(payloads) > 1
    assert all(len(p.encode()) < MAX_PAYLOAD_BYTES for p in payloads)
    assert [i for p in payloads for i in parse_payload(p)[2]] == ids
