"""What the SDK hands out: statuses and types that print as their names and still
are the contract's numbers, results that read as the contract's messages, and every
input and result type of the contract exported from san_jobs.client."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from google.protobuf import text_format
from google.protobuf.json_format import MessageToDict

import san_jobs.client
from san_jobs.client import (
    TERMINAL_STATUSES,
    CardAnalysisInput,
    CardAnalysisResult,
    EnqueueRequest,
    JobsClient,
    JobStatus,
    JobType,
    as_message,
)
from san_jobs.client._names import CONTRACT_ENUMS
from san_jobs.client.testing import FakeJobService
from san_jobs.jobsctl import _render
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

PACKAGE = pb.DESCRIPTOR.package


@pytest.fixture
def client() -> Any:
    service = FakeJobService(run=lambda job: CardAnalysisResult(summary="Short."))
    with service.client() as client:
        yield client


def test_print_job_status_prints_its_name(client: JobsClient, capsys: Any) -> None:
    job = client.wait(client.enqueue("scrap-1", CardAnalysisInput(text="x")).job.id, timeout=5)
    print(job.status)
    print(job.job_type)
    print(f"{job.status} / {job.status:>22} / %s" % job.status)
    assert capsys.readouterr().out.splitlines() == [
        "JOB_STATUS_COMPLETED",
        "JOB_TYPE_CARD_ANALYSIS",
        "JOB_STATUS_COMPLETED /   JOB_STATUS_COMPLETED / JOB_STATUS_COMPLETED",
    ]
    assert repr(job.status) == "<JobStatus.JOB_STATUS_COMPLETED: 3>"
    assert job.status is JobStatus.JOB_STATUS_COMPLETED


def test_a_status_is_still_the_contracts_number(client: JobsClient) -> None:
    job = client.wait(client.enqueue("scrap-1", CardAnalysisInput(text="x")).job.id, timeout=5)
    assert job.status == 3
    assert job.status == pb.JOB_STATUS_COMPLETED
    assert job.status in {3, 4}
    assert job.status in TERMINAL_STATUSES
    assert isinstance(job.status, int)
    assert pb.JobStatus.Name(job.status) == "JOB_STATUS_COMPLETED"
    assert f"{job.status:d}" == "3" and int(job.status) == 3
    assert json.dumps({"status": job.status}) == '{"status": 3}'
    assert {pb.JOB_STATUS_COMPLETED: "done"}[job.status] == "done"
    # Sent back as the number it is.
    listed = client.list_jobs(statuses=[job.status], job_types=[JobType.JOB_TYPE_CARD_ANALYSIS])
    assert [j.id for j in listed.jobs] == [job.id]


def test_every_enum_of_the_contract_is_one_with_its_names() -> None:
    for descriptor in pb.DESCRIPTOR.enum_types_by_name.values():
        enum = CONTRACT_ENUMS[descriptor.full_name]
        wrapper = getattr(pb, descriptor.name)
        assert [(m.name, int(m)) for m in enum] == [(v.name, v.number) for v in descriptor.values]
        assert getattr(san_jobs.client, descriptor.name) is enum
        # The generated wrapper's API, answered alike.
        assert enum.keys() == list(wrapper.keys())
        assert enum.values() == list(wrapper.values())
        assert enum.items() == list(wrapper.items())
        for value in descriptor.values:
            assert enum.Name(value.number) == wrapper.Name(value.number)
            assert enum.Value(value.name) == wrapper.Value(value.name)
            assert getattr(enum, value.name) == getattr(wrapper, value.name)
        assert enum.DESCRIPTOR is descriptor
    with pytest.raises(ValueError, match="no name defined for value 99"):
        JobStatus.Name(99)
    with pytest.raises(ValueError, match="no value defined"):
        JobStatus.Value("COMPLETED")


def test_results_read_as_their_messages(client: JobsClient) -> None:
    job = client.wait(client.enqueue("scrap-1", CardAnalysisInput(text="x")).job.id, timeout=5)
    message = as_message(job)
    assert type(message) is pb.Job
    assert isinstance(job, pb.Job)
    assert job == message and message == as_message(copy.deepcopy(job))
    assert MessageToDict(job) == MessageToDict(message)
    assert _render.to_dict(job)["status"] == "JOB_STATUS_COMPLETED"
    assert str(job) == text_format.MessageToString(message)
    assert job.HasField("card_analysis_result") and job.WhichOneof("result")
    assert type(job.card_analysis_result) is pb.CardAnalysisResult  # no enum in it: as is
    assert job.SerializeToString() == message.SerializeToString()
    response = pb.GetJobResponse(job=as_message(job))  # a message needs the message
    assert response.job.id == job.id
    with pytest.raises(TypeError):
        pb.GetJobResponse().job.CopyFrom(job)  # type: ignore[arg-type] # needs as_message


def test_enums_print_as_names_inside_every_result(client: JobsClient) -> None:
    enqueued = client.enqueue("scrap-1", CardAnalysisInput(text="x"))
    assert str(enqueued.job.status) == "JOB_STATUS_PENDING"
    stats = client.get_job_stats()
    assert [str(c.status) for c in stats.counts] == ["JOB_STATUS_COMPLETED"]
    assert [str(c.job_type) for c in stats.counts] == ["JOB_TYPE_CARD_ANALYSIS"]
    request = EnqueueRequest(target_id="t-2", card_analysis_input=CardAnalysisInput(text="x"))
    (outcome,) = client.enqueue_many([request])
    assert outcome.job is not None and str(outcome.job.status) == "JOB_STATUS_PENDING"
    pages = client.list_jobs()
    assert [str(j.status) for j in pages.jobs] == ["JOB_STATUS_COMPLETED", "JOB_STATUS_COMPLETED"]
    # A result with no enum anywhere in it is the message itself.
    assert type(client.retry_failed(all_failed=True)) is pb.RetryFailedResponse


def test_a_pause_reason_prints_as_its_name() -> None:
    from san_jobs.client._views import result

    job = pb.Job(status=pb.JOB_STATUS_PENDING)
    job.waiting_for.reason = pb.PAUSE_REASON_CIRCUIT_OPEN
    job.waiting_for.job_type = pb.JOB_TYPE_EMBEDDING
    seen = result(job)
    assert str(seen.waiting_for.reason) == "PAUSE_REASON_CIRCUIT_OPEN"
    assert str(seen.waiting_for.job_type) == "JOB_TYPE_EMBEDDING"
    unknown = result(pb.Job(status=99))  # a newer server's status: the number, as before
    assert unknown.status == 99 and str(unknown.status) == "99"


def test_a_repeated_scalar_beside_an_enum_reads_through() -> None:
    """A Job holds a status and a list of strings (depends_on): a repeated scalar has
    no message type, and reading one used to raise AttributeError in every client."""
    from san_jobs.client._views import result

    job = pb.Job(status=pb.JOB_STATUS_PENDING, depends_on=["a", "b"])
    job.waiting_for.reason = pb.PAUSE_REASON_DEPENDENCIES
    job.waiting_for.job_ids.append("a")
    seen = result(job)
    assert list(seen.depends_on) == ["a", "b"]
    assert list(seen.waiting_for.job_ids) == ["a"]
    assert str(seen.waiting_for.reason) == "PAUSE_REASON_DEPENDENCIES"


# -- exports -------------------------------------------------------------------


def _closure(descriptor: Any, into: set[str]) -> None:
    """`descriptor`'s message and every contract message under it, by name."""
    if descriptor.file is not pb.DESCRIPTOR or descriptor.name in into:
        return
    into.add(descriptor.name)
    for field in descriptor.fields:
        if field.message_type is not None:
            _closure(field.message_type, into)


# Responses the SDK does not hand out as such: it gives their job (GetJob, CancelJob,
# StreamJobUpdates) or schedule (the schedule calls), nothing (DeleteSchedule), or an
# EnqueueOutcome per item (BatchEnqueue).
UNWRAPPED = {
    "GetJobResponse": "job",
    "CancelJobResponse": "job",
    "StreamJobUpdatesResponse": "job",
    "CreateScheduleResponse": "schedule",
    "GetScheduleResponse": "schedule",
    "PauseScheduleResponse": "schedule",
    "ResumeScheduleResponse": "schedule",
}
UNWRAPPED_NOTHING = {"BatchEnqueueResponse", "DeleteScheduleResponse"}


def test_every_input_and_result_of_the_contract_is_exported() -> None:
    """Read from the contract: the messages a caller builds (EnqueueRequest and all in
    it) and every message the clients hand out, all it holds included, and every enum."""
    wanted: set[str] = set()
    _closure(pb.EnqueueRequest.DESCRIPTOR, wanted)
    for method in pb.DESCRIPTOR.services_by_name["JobService"].methods:
        output = method.output_type
        if output.name in UNWRAPPED_NOTHING:
            continue
        if output.name in UNWRAPPED:
            output = output.fields_by_name[UNWRAPPED[output.name]].message_type
        _closure(output, wanted)
    assert "JobAttempt" in wanted and "UsageTotal" in wanted  # the closure reaches down
    for name in sorted(wanted):
        assert name in san_jobs.client.__all__, f"{name} is not exported"
        assert getattr(san_jobs.client, name) is getattr(pb, name)
    for name in pb.DESCRIPTOR.enum_types_by_name:
        assert name in san_jobs.client.__all__, f"enum {name} is not exported"
    assert "EnqueueOutcome" in san_jobs.client.__all__


def test_every_job_types_input_and_result_is_exported() -> None:
    """Read from the contract: a new job type's messages are exported with it."""
    from san_jobs.client._job_types import JOB_TYPES

    for info in JOB_TYPES:
        for message in (info.input_type, info.result_type):
            name = message.DESCRIPTOR.name
            assert name in san_jobs.client.__all__, f"{info.name}: {name} is not exported"
            assert getattr(san_jobs.client, name) is message


def test_public_names_are_pinned() -> None:
    assert sorted(san_jobs.client.__all__) == sorted(
        [
            "SERVICE_CONFIG",
            "TERMINAL_STATUSES",
            "AsyncJobsClient",
            "CardAnalysisInput",
            "CardAnalysisResult",
            "ChannelSettings",
            "CursorExpiredError",
            "DispatchPause",
            "DuplicateJobError",
            "EmbeddingInput",
            "EmbeddingResult",
            "EnqueueOutcome",
            "EnqueueRequest",
            "EnqueueResponse",
            "FailureGroup",
            "FieldViolation",
            "GetJobStatsResponse",
            "GetUsageResponse",
            "InvalidJobStateError",
            "InvalidRequestError",
            "Job",
            "JobAttempt",
            "JobCount",
            "JobInput",
            "JobNotFoundError",
            "JobStatus",
            "JobType",
            "JobsClient",
            "JobsError",
            "ListFailureGroupsResponse",
            "ListJobsResponse",
            "ListSchedulesResponse",
            "OnDuplicate",
            "PauseReason",
            "PemSource",
            "PermissionDeniedError",
            "PruneCount",
            "PruneJobsResponse",
            "RateLimitedError",
            "RecallGenerationInput",
            "RecallGenerationResult",
            "RecallQuestion",
            "RecallSource",
            "RetryFailedResponse",
            "Schedule",
            "ScheduleExistsError",
            "ScheduleNotFoundError",
            "ServiceUnavailableError",
            "SkippedJob",
            "StreamJobChangesResponse",
            "TilGenerationInput",
            "TilGenerationResult",
            "UnauthenticatedError",
            "Usage",
            "UsageTotal",
            "WaitTimeoutError",
            "as_message",
            "error_from_rpc",
            "is_terminal",
        ]
    )
    for name in san_jobs.client.__all__:
        assert getattr(san_jobs.client, name) is not None
