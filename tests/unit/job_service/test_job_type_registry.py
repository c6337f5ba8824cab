"""The job-type registry (san_jobs/job_service/domain/job_types.py) against the contract: every
entry names real parts of the generated descriptors, by the conventions the clients
rely on, and every type of the contract is registered."""

from __future__ import annotations

from typing import Any

import pytest

from san_jobs.client._job_types import JOB_TYPES as CONTRACT_TYPES
from san_jobs.job_service.domain.dependencies import ACCEPTED
from san_jobs.job_service.domain.job_types import (
    JOB_TYPES,
    JobType,
    JobTypeSpec,
    _registry,
    check_card_analysis,
    default_deadlines,
)
from san_jobs.job_service.gateway_client import USAGE_FIELD
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2 as gw
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

ENTRIES = list(JOB_TYPES.values())
GATEWAY = gw.DESCRIPTOR.services_by_name["AiGatewayService"].methods_by_name


def oneof_cases(message: Any, oneof: str) -> dict[str, Any]:
    """Case name -> its message descriptor."""
    return {f.name: f.message_type for f in message.DESCRIPTOR.oneofs_by_name[oneof].fields}


def assert_carries(
    source: Any, target: Any, path: str = "", leaving: frozenset[str] = frozenset()
) -> None:
    """Every field of message `source` is in `target` under its name, of the same type
    (nested messages likewise): a dict of `source` reads as a `target` with nothing lost.
    `leaving`: top-level fields of `source` that are taken off before (not carried)."""
    target_fields = {f.name: f for f in target.fields}
    for field in source.fields:
        if field.name in leaving:
            continue
        where = f"{path}{field.name}"
        assert where and field.name in target_fields, f"{target.name} lacks {where}"
        other = target_fields[field.name]
        assert (other.type, other.is_repeated) == (field.type, field.is_repeated), where
        if field.message_type is not None:
            assert_carries(field.message_type, other.message_type, f"{where}.")


def test_every_member_is_registered_once_in_the_enums_order() -> None:
    assert list(JOB_TYPES) == list(JobType)
    assert all(spec.job_type is job_type for job_type, spec in JOB_TYPES.items())


def test_a_member_without_an_entry_or_with_two_is_refused() -> None:
    first, *rest = ENTRIES
    with pytest.raises(ValueError, match=f"without a registry entry: {first.name}"):
        _registry(rest)
    with pytest.raises(ValueError, match=f"{first.name} is registered twice"):
        _registry([first, *ENTRIES])


def test_every_type_says_which_dependencies_it_takes() -> None:
    """A type missing from dependencies.ACCEPTED made an Enqueue with depends_on an
    INTERNAL error (a KeyError), found by adding a fifth type
    (docs/adding_a_job_type.md)."""
    assert set(ACCEPTED) == set(JobType)


def test_the_registry_and_the_contract_list_the_same_types() -> None:
    """JobService's types are the clients' (read from the descriptors): a type in the
    proto without an entry, or an entry the proto lacks, fails here."""
    assert [info.name for info in CONTRACT_TYPES] == [spec.name for spec in ENTRIES]
    assert [(i.input_field, i.result_field) for i in CONTRACT_TYPES] == [
        (s.input_field, s.result_field) for s in ENTRIES
    ]
    assert set(oneof_cases(pb.EnqueueRequest, "input")) == {s.input_field for s in ENTRIES}
    assert set(oneof_cases(pb.Job, "result")) == {s.result_field for s in ENTRIES}


@pytest.mark.parametrize("spec", ENTRIES, ids=lambda s: s.name)
def test_an_entry_names_its_api_parts_by_the_convention(spec: JobTypeSpec) -> None:
    assert pb.JobType.Value(spec.proto_name) > 0
    assert spec.proto_name == f"JOB_TYPE_{spec.name}"
    assert spec.input_field == f"{spec.name.lower()}_input"
    assert spec.result_field == f"{spec.name.lower()}_result"
    enqueue_input = oneof_cases(pb.EnqueueRequest, "input")[spec.input_field]
    assert oneof_cases(pb.Job, "input")[spec.input_field] is enqueue_input
    assert spec.result_field in oneof_cases(pb.Job, "result")
    assert spec.default_deadline > 0


@pytest.mark.parametrize("spec", ENTRIES, ids=lambda s: s.name)
def test_the_gateway_method_carries_the_input_and_gives_the_result(spec: JobTypeSpec) -> None:
    """A job's stored input is sent as the method's request and the answer stored as
    the result, by field name: the request must take every input field, and the
    result every answer field (but the call's usage, kept apart with the attempt),
    with the same types."""
    method = GATEWAY[spec.gateway_method]
    job_input = oneof_cases(pb.Job, "input")[spec.input_field]
    result = oneof_cases(pb.Job, "result")[spec.result_field]
    assert_carries(job_input, method.input_type)
    assert_carries(method.output_type, result, leaving=frozenset({USAGE_FIELD}))
    assert method.output_type.fields_by_name[USAGE_FIELD].message_type is gw.Usage.DESCRIPTOR
    # Its StreamCalls case: the method in snake_case, of the same messages.
    assert oneof_cases(gw.StreamedCall, "request")[spec.gateway_field] is method.input_type
    assert oneof_cases(gw.StreamedCallResult, "outcome")[spec.gateway_field] is (method.output_type)


def test_the_derived_names() -> None:
    card = JOB_TYPES[JobType.CARD_ANALYSIS]
    assert (card.proto_name, card.gateway_field) == ("JOB_TYPE_CARD_ANALYSIS", "analyze_content")
    assert card.check_input is check_card_analysis
    assert default_deadlines()[JobType.CARD_ANALYSIS] == 30.0
