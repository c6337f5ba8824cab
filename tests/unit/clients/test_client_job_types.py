"""The clients read the job types from the generated descriptors: every type of the
contract can be enqueued with the SDK and jobsctl and shown by jobsctl and san-web,
with no client edit for a new one."""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from san_jobs.client._job_types import JOB_TYPES, JobTypeInfo, job_type_info
from san_jobs.client._requests import enqueue_request
from san_jobs.jobsctl import _job_inputs, _render, cli
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.web.app import job_view

IDS = [info.name for info in JOB_TYPES]


def filled(message: Message) -> Message:
    """`message` with every field set to something (repeated fields to two items)."""
    for field in message.DESCRIPTOR.fields:
        count = 2 if field.is_repeated else 1
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            if field.is_repeated:
                for _ in range(count):
                    filled(getattr(message, field.name).add())
            else:
                filled(getattr(message, field.name))
            continue
        value: Any = {
            FieldDescriptor.TYPE_STRING: f"{field.name} value",
            FieldDescriptor.TYPE_FLOAT: 0.5,
            FieldDescriptor.TYPE_DOUBLE: 0.5,
            FieldDescriptor.TYPE_BOOL: True,
        }.get(field.type, 1)
        if field.is_repeated:
            getattr(message, field.name).extend([value] * count)
        else:
            setattr(message, field.name, value)
    return message


def completed(info: JobTypeInfo) -> pb.Job:
    job = pb.Job(id="j1", job_type=info.value, status=pb.JOB_STATUS_COMPLETED, target_id="t")
    getattr(job, info.result_field).CopyFrom(filled(info.result_type()))
    return job


def test_the_contract_lists_every_job_type_enum_value() -> None:
    names = [v.name for v in pb.JobType.DESCRIPTOR.values if v.number != 0]
    assert [f"JOB_TYPE_{info.name}" for info in JOB_TYPES] == names
    for info in JOB_TYPES:
        assert job_type_info(info.value) is info
        assert pb.EnqueueRequest.DESCRIPTOR.fields_by_name[info.input_field].message_type is (
            info.input_type.DESCRIPTOR
        )
    assert job_type_info(pb.JOB_TYPE_UNSPECIFIED) is None


@pytest.mark.parametrize("info", JOB_TYPES, ids=IDS)
def test_the_sdk_infers_the_type_of_every_input(info: JobTypeInfo) -> None:
    job_input = filled(info.input_type())
    request = enqueue_request(
        "t", job_input, job_type=None, requested_by="", request_id=None, max_attempts=0,
        return_existing=False,
    )  # fmt: skip
    assert request.job_type == info.value
    assert request.WhichOneof("input") == info.input_field
    assert getattr(request, info.input_field) == job_input


def test_the_sdk_refuses_a_message_that_is_no_job_input() -> None:
    with pytest.raises(TypeError, match="not a job input: Job"):
        enqueue_request(
            "t", pb.Job(), job_type=None, requested_by="", request_id=None, max_attempts=0,
            return_existing=False,
        )  # fmt: skip


def _enqueue_args(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(["enqueue", *argv])


def test_jobsctl_has_an_enqueue_command_for_every_type() -> None:
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    kinds = next(
        a for a in commands.choices["enqueue"]._actions if isinstance(a, argparse._SubParsersAction)
    )
    assert list(kinds.choices) == [info.cli_name for info in JOB_TYPES]
    type_flag = next(a for a in commands.choices["list"]._actions if "--type" in a.option_strings)
    assert type_flag.help == f"{_job_inputs.job_type_choices()} (repeatable)"
    assert all(info.cli_name in str(type_flag.help) for info in JOB_TYPES)


def test_a_type_without_friendly_flags_gets_flags_from_its_input(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a new type gets: one flag per plain field, --input for the rest."""
    monkeypatch.setattr(_job_inputs, "_FRIENDLY", {})
    card = _enqueue_args("card-analysis", "--target-id", "x", "--text", "hi", "--url", "u")
    assert _job_inputs.enqueue_input(card) == pb.CardAnalysisInput(text="hi", url="u")
    til = _enqueue_args(
        "til-generation", "--target-id", "x", "--input", '{"day": "2026-01-02", "notes": ["a"]}',
        "--notes", "b", "--notes", "c",
    )  # fmt: skip
    assert _job_inputs.enqueue_input(til) == pb.TilGenerationInput(
        day="2026-01-02", notes=["b", "c"]
    )
    recall = _enqueue_args(
        "recall-generation", "--target-id", "x", "--input", '{"sources": [{"text": "t"}]}',
        "--question-count", "2",
    )  # fmt: skip
    assert _job_inputs.enqueue_input(recall) == pb.RecallGenerationInput(
        sources=[pb.RecallSource(text="t")], question_count=2
    )
    bad = _enqueue_args("card-analysis", "--target-id", "x", "--input", '{"text": 5}')
    with pytest.raises(_job_inputs.InputError, match="--input is not a CardAnalysisInput"):
        _job_inputs.enqueue_input(bad)


@pytest.mark.parametrize("info", JOB_TYPES, ids=IDS)
def test_jobsctl_shows_the_result_of_every_type(info: JobTypeInfo) -> None:
    rows = dict(_render.result_lines(completed(info)))
    assert rows["model"] == "model value"
    assert len(rows) >= 2  # the model and what was made


@pytest.mark.parametrize("info", JOB_TYPES, ids=IDS)
def test_san_web_shows_the_result_of_every_type(info: JobTypeInfo) -> None:
    view = job_view(completed(info))
    assert view["jobType"] == info.name
    result = view["result"]
    vectors = {
        f.json_name
        for f in info.result_type.DESCRIPTOR.fields
        if f.is_repeated and f.type == FieldDescriptor.TYPE_FLOAT
    }
    expected = {f.json_name for f in info.result_type.DESCRIPTOR.fields} - vectors
    assert set(result) == expected and result["model"] == "model value"


def test_the_existing_results_look_as_before() -> None:
    card, til, recall = (completed(info) for info in JOB_TYPES[:3])
    assert _render.result_lines(card) == [
        ("summary", "summary value"),
        ("tags", "tags value, tags value"),
        ("embedding", "2 dimensions"),
        ("model", "model value"),
    ]
    assert _render.result_lines(til) == [
        ("title", "title value"),
        ("body", "body value"),
        ("model", "model value"),
    ]
    assert _render.result_lines(recall)[0] == ("Q1", "question value\n→ answer value")
    assert job_view(recall)["result"] == {
        "questions": [{"question": "question value", "answer": "answer value", "sourceIndex": 1}]
        * 2,
        "model": "model value",
    }
