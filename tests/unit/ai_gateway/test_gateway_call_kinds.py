"""The gateway's kinds of call (san_jobs/ai_gateway/calls.py CALL_KINDS) are exactly the
contract's unary RPCs and StreamCalls cases, and each has its servicer method."""

from __future__ import annotations

from typing import Any

from san_jobs.ai_gateway import stream
from san_jobs.ai_gateway.calls import CALL_KINDS
from san_jobs.ai_gateway.servicer import AiGatewayServicer
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2 as pb
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2_grpc as pb_grpc

SERVICE = pb.DESCRIPTOR.services_by_name["AiGatewayService"]


def cases(message: Any, oneof: str) -> set[str]:
    return {f.name for f in message.DESCRIPTOR.oneofs_by_name[oneof].fields}


def test_every_unary_rpc_is_a_kind_of_call() -> None:
    unary = {m.name for m in SERVICE.methods if not m.client_streaming}
    assert {kind.method for kind in CALL_KINDS} == unary


def test_every_streamcalls_case_is_a_kind_of_call() -> None:
    assert set(stream._KINDS) == cases(pb.StreamedCall, "request")
    assert set(stream._KINDS) == cases(pb.StreamedCallResult, "outcome") - {"error"}
    for field, kind in stream._KINDS.items():
        method = SERVICE.methods_by_name[kind.method]
        call_case = pb.StreamedCall.DESCRIPTOR.fields_by_name[field]
        assert call_case.message_type is method.input_type
        result_case = pb.StreamedCallResult.DESCRIPTOR.fields_by_name[field]
        assert result_case.message_type is method.output_type


def test_every_kind_has_its_servicer_method() -> None:
    base = pb_grpc.AiGatewayServiceServicer
    for kind in CALL_KINDS:
        assert getattr(AiGatewayServicer, kind.method) is not getattr(base, kind.method)
