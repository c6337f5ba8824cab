"""message_dicts gives json_format's answers, and takes its fast path for a message
whose odd fields (int64, well-known types, ...) are unset: the gateway's answers carry
a `usage` (int64 tokens, a Duration) that checked_answer clears before the dump."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message

from san_jobs.job_service.gateway_client import checked_answer
from san_jobs.job_service.message_dicts import message_from_dict, message_to_dict
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2 as gw


def analyzed(**extra: Any) -> gw.AnalyzeContentResponse:
    return gw.AnalyzeContentResponse(
        summary="Queues keep work safe.",
        tags=["queue", "lease"],
        embedding=[1.0, 0.1, -2.5, 0.0],
        model="instant",
        **extra,
    )


def usage() -> gw.Usage:
    return gw.Usage(
        model="m", input_tokens=2**40, output_tokens=3, duration=Duration(nanos=5), cached=True
    )


@pytest.fixture
def no_json_format(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if json_format is used (the fast path was not taken)."""

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("json_format used")

    monkeypatch.setattr(json_format, "MessageToDict", refuse)
    monkeypatch.setattr(json_format, "ParseDict", refuse)


def reference(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


@pytest.mark.parametrize(
    "message",
    [
        analyzed(),
        analyzed(usage=usage()),
        gw.Usage(),
        usage(),
        gw.GenerateRecallResponse(
            questions=[gw.Question(question="q", answer="a", source_index=2)], model="m"
        ),
    ],
    ids=["plain", "usage set", "empty usage", "usage", "nested"],
)
def test_message_to_dict_equals_json_format(message: Message) -> None:
    assert message_to_dict(message) == reference(message)


@pytest.mark.parametrize(
    "data",
    [
        {"summary": "s", "tags": ["a"], "embedding": [0.5], "model": "m"},
        {"summary": "s", "usage": {"model": "m", "input_tokens": "7", "duration": "1.5s"}},
        {"summary": "s", "unknownField": 1},
    ],
    ids=["plain", "usage given", "unknown field"],
)
def test_message_from_dict_equals_json_format(data: dict[str, Any]) -> None:
    expected = json_format.ParseDict(data, gw.AnalyzeContentResponse(), ignore_unknown_fields=True)
    assert message_from_dict(gw.AnalyzeContentResponse, data) == expected


@pytest.mark.usefixtures("no_json_format")
def test_unset_odd_fields_take_the_fast_path() -> None:
    message = analyzed()
    assert message_to_dict(message) == {
        "summary": "Queues keep work safe.",
        "tags": ["queue", "lease"],
        "embedding": [1.0, 0.1, -2.5, 0.0],
        "model": "instant",
    }
    rebuilt = message_from_dict(gw.AnalyzeContentResponse, message_to_dict(message))
    assert rebuilt == message


def test_an_answer_with_usage_is_stored_without_json_format(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answer = analyzed(usage=usage())
    expected = reference(analyzed())
    monkeypatch.setattr(json_format, "MessageToDict", pytest.fail)
    stored = checked_answer(answer, deadline=5.0)
    assert stored.result == expected
    assert stored.usage is not None and stored.usage.input_tokens == 2**40
