import json

import grpc
import pytest
from google.rpc import code_pb2, error_details_pb2, status_pb2

from san_jobs.ai_gateway import errors
from san_jobs.ai_gateway.errors import (
    BackendUnavailable,
    FieldViolation,
    GatewayError,
    InternalError,
    InvalidRequest,
    RateLimited,
    TokenLimitExceeded,
    json_error_message,
)
from san_jobs.ai_gateway.transport_errors import (
    DOMAIN,
    WIRE,
    cancelled_status,
    status_code_name,
    to_rpc_status,
    to_status_proto,
)


def _decode(status: grpc.Status) -> status_pb2.Status:
    details = dict(status.trailing_metadata)["grpc-status-details-bin"]
    return status_pb2.Status.FromString(details)


def test_token_limit_status() -> None:
    status = to_rpc_status(TokenLimitExceeded(9000, 8192))
    assert status.code == grpc.StatusCode.INVALID_ARGUMENT
    assert status.details == "Token limit exceeded (9000 > 8192)"
    info = error_details_pb2.ErrorInfo()
    assert _decode(status).details[0].Unpack(info)
    assert (info.reason, info.domain) == ("TOKEN_LIMIT_EXCEEDED", DOMAIN)


def test_rate_limited_has_retry_info_and_quota_failure() -> None:
    err = RateLimited("slow down", retry_delay=1.2345, subject="client:x", description="1/s")
    decoded = _decode(to_rpc_status(err))
    retry, quota = error_details_pb2.RetryInfo(), error_details_pb2.QuotaFailure()
    assert decoded.details[1].Unpack(retry)
    assert decoded.details[2].Unpack(quota)
    assert (retry.retry_delay.seconds, retry.retry_delay.nanos) == (1, 235_000_000)
    assert quota.violations[0].subject == "client:x"


def test_bad_request_names_fields() -> None:
    err = InvalidRequest([FieldViolation("text", "blank"), FieldViolation("day", "bad")])
    decoded = _decode(to_rpc_status(err))
    bad = error_details_pb2.BadRequest()
    assert decoded.details[1].Unpack(bad)
    assert [v.field for v in bad.field_violations] == ["text", "day"]


def test_unavailable_code() -> None:
    assert to_rpc_status(BackendUnavailable("down")).code == grpc.StatusCode.UNAVAILABLE


def test_json_error_message_uses_parser_line() -> None:
    with pytest.raises(json.JSONDecodeError) as caught:
        json.loads('{\n"a": 1,\n"b": 2,\n"c": }')
    assert json_error_message(caught.value).startswith("JSON Parse Error at line 4")


@pytest.mark.parametrize(
    "err",
    [
        TokenLimitExceeded(9000, 8192),
        InvalidRequest([FieldViolation("text", "blank")]),
        RateLimited("slow down", retry_delay=0.5, subject="client:x", description="1/s"),
        BackendUnavailable("down"),
        InternalError(),
    ],
)
def test_unary_status_carries_the_status_proto(err: GatewayError) -> None:
    # One mapping: a StreamCalls result carries exactly what a unary RPC's trailer does.
    status = to_rpc_status(err)
    proto = to_status_proto(err)
    assert _decode(status) == proto
    assert (status.code.value[0], status.details) == (proto.code, proto.message)
    # The call record names the same code.
    assert status_code_name(err) == status.code.name


def test_every_gateway_error_has_its_own_status() -> None:
    # A new error class gets a code and a reason on purpose, not its base class's.
    defined = {
        value
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, GatewayError)
    }
    assert defined == set(WIRE)


def test_internal_error_tells_nothing_more() -> None:
    proto = to_status_proto(InternalError())
    assert (proto.code, proto.message) == (code_pb2.INTERNAL, "internal error in the AI gateway")
    assert list(proto.details) == []


def test_cancelled_status() -> None:
    assert cancelled_status().code == code_pb2.CANCELLED
