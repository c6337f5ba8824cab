"""san_jobs.shared.rich_status: google.rpc.Status with packed details, as both servers send it."""

from __future__ import annotations

from google.rpc import code_pb2, error_details_pb2, status_pb2

from san_jobs.shared import rich_status
from san_jobs.shared.field_violation import FieldViolation


def test_details_are_packed_in_order_and_the_trailer_carries_the_whole_status() -> None:
    rich = rich_status.status(
        code_pb2.RESOURCE_EXHAUSTED,
        "slow down",
        [
            rich_status.error_info("RATE_LIMITED", "example.san", {"limit": "rate"}),
            rich_status.retry_info(1.5),
            rich_status.quota_failure("client:x", "1 per second"),
        ],
    )
    info = error_details_pb2.ErrorInfo()
    retry = error_details_pb2.RetryInfo()
    quota = error_details_pb2.QuotaFailure()
    assert rich.details[0].Unpack(info) and rich.details[1].Unpack(retry)
    assert rich.details[2].Unpack(quota)
    assert (info.reason, info.domain, dict(info.metadata)) == (
        "RATE_LIMITED",
        "example.san",
        {"limit": "rate"},
    )
    assert (retry.retry_delay.seconds, retry.retry_delay.nanos) == (1, 500_000_000)
    assert (quota.violations[0].subject, quota.violations[0].description) == (
        "client:x",
        "1 per second",
    )
    grpc_status = rich_status.to_grpc_status(rich)
    assert (grpc_status.code.name, grpc_status.details) == ("RESOURCE_EXHAUSTED", "slow down")
    trailer = dict(grpc_status.trailing_metadata)["grpc-status-details-bin"]
    assert status_pb2.Status.FromString(trailer) == rich


def test_bad_request_names_each_field_in_order() -> None:
    packed = rich_status.bad_request(
        [FieldViolation("text", "blank"), FieldViolation("day", "bad")]
    )
    bad = error_details_pb2.BadRequest()
    bad.CopyFrom(packed)
    assert [(v.field, v.description) for v in bad.field_violations] == [
        ("text", "blank"),
        ("day", "bad"),
    ]


def test_a_status_without_details_has_none() -> None:
    assert list(rich_status.status(code_pb2.CANCELLED, "gone").details) == []


def test_a_duration_rounds_up_to_the_millisecond_and_is_never_negative() -> None:
    d = rich_status.duration(0.0001)
    assert (d.seconds, d.nanos) == (0, 1_000_000)
    assert rich_status.duration(2.0).seconds == 2
    assert rich_status.duration(-3).seconds == 0
