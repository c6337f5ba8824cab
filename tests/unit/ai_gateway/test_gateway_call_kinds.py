"""The gateway's kinds of call (san_jobs/ai_gateway/kinds/ KINDS) are exactly the
contract's unary RPCs and StreamCalls cases, each has its servicer method, and every
backend the gateway ships has a handler for each."""

from __future__ import annotations

import dataclasses
import inspect
import sys
import typing
from typing import Any

import pytest

from san_jobs.ai_gateway.backends.instant import InstantBackend
from san_jobs.ai_gateway.backends.local.backend import LocalBackend
from san_jobs.ai_gateway.backends.openai import OpenAIBackend
from san_jobs.ai_gateway.calls import response_class
from san_jobs.ai_gateway.kind import Kind
from san_jobs.ai_gateway.kinds import KINDS, KINDS_BY_FIELD
from san_jobs.ai_gateway.servicer import AiGatewayServicer
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2 as pb

SERVICE = pb.DESCRIPTOR.services_by_name["AiGatewayService"]
BACKENDS = [InstantBackend, LocalBackend, OpenAIBackend]


def cases(message: Any, oneof: str) -> set[str]:
    return {f.name for f in message.DESCRIPTOR.oneofs_by_name[oneof].fields}


def test_every_unary_rpc_is_a_kind_of_call() -> None:
    unary = {m.name for m in SERVICE.methods if not m.client_streaming}
    assert {kind.method for kind in KINDS} == unary
    assert len(KINDS) == len(unary)


def test_every_streamcalls_case_is_a_kind_of_call() -> None:
    assert set(KINDS_BY_FIELD) == cases(pb.StreamedCall, "request")
    assert set(KINDS_BY_FIELD) == cases(pb.StreamedCallResult, "outcome") - {"error"}
    for field, kind in KINDS_BY_FIELD.items():
        method = SERVICE.methods_by_name[kind.method]
        call_case = pb.StreamedCall.DESCRIPTOR.fields_by_name[field]
        assert call_case.message_type is method.input_type
        result_case = pb.StreamedCallResult.DESCRIPTOR.fields_by_name[field]
        assert result_case.message_type is method.output_type


def test_every_kind_has_its_servicer_method() -> None:
    # add_servicer finds each of the contract's RPCs on the servicer by name.
    for method in SERVICE.methods:
        assert inspect.iscoroutinefunction(getattr(AiGatewayServicer, method.name)), method.name
    for kind in KINDS:
        method = getattr(AiGatewayServicer, kind.method)
        assert method.__name__ == kind.method
        assert method.__doc__ == kind.summary


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.__name__)
def test_every_backend_has_a_handler_for_every_kind(backend: type) -> None:
    for kind in KINDS:
        handler = getattr(backend, kind.handler, None)
        assert inspect.iscoroutinefunction(handler), f"{backend.__name__}.{kind.handler}"
        hints = typing.get_type_hints(handler)
        # The handler takes the kind's input (what its validation gives) and gives the
        # result the kind counts (answer_texts's argument is not annotated: a lambda).
        assert hints["request"] is typing.get_type_hints(kind.validate)["return"], kind.handler
        assert hints["return"] is result_type(kind), f"{backend.__name__}.{kind.handler}"


def result_type(kind: Kind[Any, Any]) -> type:
    """The kind's plain result: the one dataclass of its module ending in Result."""
    module = sys.modules[kind.validate.__module__]
    (found,) = [v for k, v in vars(module).items() if k.endswith("Result") and isinstance(v, type)]
    return found


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.method)
def test_each_result_is_its_response_message_by_name(kind: Kind[Any, Any]) -> None:
    # calls.message_fields builds the response from the result by field name.
    response = response_class(kind).DESCRIPTOR
    names = [f.name for f in dataclasses.fields(result_type(kind))]
    assert sorted(names) == sorted(f.name for f in response.fields)
