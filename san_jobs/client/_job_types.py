"""The job types, as the generated descriptors declare them: the SDK and the clients
read their type lists from here, so a type added to the contract needs no client edit.

The contract names a type's parts by one convention (JobService's registry,
san_jobs/job_service/domain/job_types.py, follows it, and a test checks both):
`JOB_TYPE_<NAME>` in the JobType enum, `<name>_input` in the `input` oneof of
EnqueueRequest and Job, `<name>_result` in Job's `result` oneof.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.protobuf import message_factory
from google.protobuf.message import Message

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

_PREFIX = "JOB_TYPE_"
_UNSPECIFIED = "JOB_TYPE_UNSPECIFIED"


@dataclass(frozen=True)
class JobTypeInfo:
    """One job type of the contract."""

    value: pb.JobType.ValueType  # the JobType enum number
    name: str  # CARD_ANALYSIS, as JobService stores and shows it
    input_field: str  # card_analysis_input, the case of the `input` oneofs
    input_type: type[Message]  # CardAnalysisInput
    result_field: str  # card_analysis_result, the case of Job's `result` oneof
    result_type: type[Message]  # CardAnalysisResult

    @property
    def cli_name(self) -> str:
        """card-analysis: how a command line names the type."""
        return self.name.lower().replace("_", "-")


def _case(message: type[Message], oneof: str, field: str, enum_name: str) -> type[Message]:
    """The message of case `field` of `message`'s `oneof`; LookupError if the contract
    does not follow the naming convention for `enum_name`."""
    # Any: the stubs' field descriptors may be upb's or the pure-Python ones.
    cases: dict[str, Any] = {f.name: f for f in message.DESCRIPTOR.oneofs_by_name[oneof].fields}
    if field not in cases:
        raise LookupError(
            f"{enum_name} has no {message.DESCRIPTOR.name}.{oneof} case named {field!r}"
        )
    return message_factory.GetMessageClass(cases[field].message_type)


def _read_contract() -> tuple[JobTypeInfo, ...]:
    types = []
    for value in pb.JobType.DESCRIPTOR.values:
        if value.name == _UNSPECIFIED:
            continue
        name = value.name.removeprefix(_PREFIX)
        input_field = f"{name.lower()}_input"
        result_field = f"{name.lower()}_result"
        input_type = _case(pb.EnqueueRequest, "input", input_field, value.name)
        if _case(pb.Job, "input", input_field, value.name) is not input_type:
            raise LookupError(f"{value.name}: Job and EnqueueRequest disagree on {input_field}")
        types.append(
            JobTypeInfo(
                value=pb.JobType.Value(value.name),
                name=name,
                input_field=input_field,
                input_type=input_type,
                result_field=result_field,
                result_type=_case(pb.Job, "result", result_field, value.name),
            )
        )
    return tuple(types)


JOB_TYPES: tuple[JobTypeInfo, ...] = _read_contract()
"""Every job type of the contract, in the enum's order."""

_BY_VALUE = {info.value: info for info in JOB_TYPES}
_BY_INPUT = {info.input_type.DESCRIPTOR.full_name: info for info in JOB_TYPES}
_BY_RESULT_FIELD = {info.result_field: info for info in JOB_TYPES}


def job_type_info(value: pb.JobType.ValueType) -> JobTypeInfo | None:
    """The type with enum number `value`, or None (unspecified, or unknown here)."""
    return _BY_VALUE.get(value)


def job_type_of_input(job_input: Message) -> JobTypeInfo:
    """The type whose input message `job_input` is; TypeError for any other message."""
    info = _BY_INPUT.get(job_input.DESCRIPTOR.full_name)
    if info is None:
        known = ", ".join(i.input_type.__name__ for i in JOB_TYPES)
        raise TypeError(f"not a job input: {type(job_input).__name__} (expected one of {known})")
    return info


def job_result(job: pb.Job) -> tuple[JobTypeInfo, Message] | None:
    """The job's type and result message, or None while it has no result."""
    case = job.WhichOneof("result")
    if case is None:
        return None
    result: Message = getattr(job, case)
    return _BY_RESULT_FIELD[case], result
