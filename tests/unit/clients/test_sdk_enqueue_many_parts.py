"""enqueue_many's parts without a server: the requests as sent (the caller's messages
untouched), chunks by count and by bytes, and the reading of one answer."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from _clients_support import bad_request, error_info
from google.protobuf import any_pb2
from google.rpc import status_pb2

from san_jobs.client import DuplicateJobError, InvalidRequestError, JobsError
from san_jobs.client._batch import as_sent, check_batch_size, chunks, outcomes
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb


def card(target: str, text: str = "t", **kwargs: Any) -> pb.EnqueueRequest:
    return pb.EnqueueRequest(
        target_id=target, card_analysis_input=pb.CardAnalysisInput(text=text), **kwargs
    )


def status(code: grpc.StatusCode, message: str, *details: object) -> status_pb2.Status:
    result = status_pb2.Status(code=code.value[0], message=message)
    for detail in details:
        packed = any_pb2.Any()
        packed.Pack(detail)  # type: ignore[arg-type]
        result.details.append(packed)
    return result


def test_a_request_is_sent_with_a_key_and_its_type_but_never_changed() -> None:
    given = card("a")
    sent = as_sent(given)
    assert sent.request_id and sent.job_type == pb.JOB_TYPE_CARD_ANALYSIS
    assert not given.request_id and given.job_type == pb.JOB_TYPE_UNSPECIFIED
    keyed = card("b", request_id="k", job_type=pb.JOB_TYPE_CARD_ANALYSIS)
    assert as_sent(keyed) is keyed  # nothing to add: not copied
    # A type given is kept even when it disagrees with the input: the server says so.
    odd = card("c", job_type=pb.JOB_TYPE_EMBEDDING)
    assert as_sent(odd).job_type == pb.JOB_TYPE_EMBEDDING
    with pytest.raises(TypeError):
        as_sent(pb.CardAnalysisInput(text="x"))  # type: ignore[arg-type]


def test_chunks_hold_at_most_batch_size_requests_and_about_max_bytes() -> None:
    sizes = [len(c) for c in chunks((card(str(i)) for i in range(7)), 3, 1 << 20)]
    assert sizes == [3, 3, 1]
    big = [card(str(i), "x" * 1_000) for i in range(5)]
    assert [len(c) for c in chunks(big, 500, 2_200)] == [2, 2, 1]
    # A request larger than max_bytes alone still goes, alone.
    assert [len(c) for c in chunks([card("a"), card("b", "y" * 5_000)], 500, 1_000)] == [1, 1]
    for bad in (0, 1_001):
        with pytest.raises(ValueError):
            check_batch_size(bad)


def test_each_result_becomes_the_error_enqueue_would_raise() -> None:
    response = pb.BatchEnqueueResponse(
        results=[
            pb.BatchEnqueueResult(response=pb.EnqueueResponse(job=pb.Job(id="j1"))),
            pb.BatchEnqueueResult(
                response=pb.EnqueueResponse(job=pb.Job(id="j0"), deduplicated=True)
            ),
            pb.BatchEnqueueResult(
                error=status(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "bad",
                    bad_request(("requests[2].target_id", "is required")),
                )
            ),
            pb.BatchEnqueueResult(
                error=status(
                    grpc.StatusCode.ALREADY_EXISTS,
                    "dup",
                    error_info("DUPLICATE_JOB", existingJobId="j-old"),
                )
            ),
        ]
    )
    created, returned, invalid, duplicate = outcomes(response, 4)
    assert created.ok and created.job is not None and created.job.id == "j1"
    assert returned.deduplicated and returned.job is not None and returned.job.id == "j0"
    assert isinstance(invalid.error, InvalidRequestError) and not invalid.ok
    assert [(v.field, v.description) for v in invalid.error.field_violations] == [
        ("target_id", "is required")
    ]
    assert isinstance(duplicate.error, DuplicateJobError)
    assert duplicate.error.existing_job_id == "j-old"
    with pytest.raises(JobsError, match="3 results for 4"):
        outcomes(pb.BatchEnqueueResponse(results=response.results[:3]), 4)
