"""BatchEnqueue's answer budget (transport/batch.py): the bound checked before any item
is stored covers every answer the store can lead to, and an answer over the send
limit is cut to job identities that fit."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from san_jobs.job_service.domain.dispatch import DispatchPause, PauseReason
from san_jobs.job_service.domain.errors import (
    DuplicateJobError,
    StorageDataError,
    StorageUnavailableError,
)
from san_jobs.job_service.domain.job_ids import new_job_id
from san_jobs.job_service.domain.limits import (
    MAX_ATTEMPTS_LIMIT,
    MAX_REQUEST_ID_CHARS,
    MAX_REQUESTED_BY_CHARS,
    MAX_TARGET_ID_CHARS,
)
from san_jobs.job_service.domain.model import JobAttempt, JobStatus, JobType
from san_jobs.job_service.domain.ports import EnqueueOutcome
from san_jobs.job_service.domain.validation import EnqueueLimits
from san_jobs.job_service.storage.rows import pending_job
from san_jobs.job_service.transport import batch
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

# Nanoseconds in every time: the longest Timestamp a job can carry.
NOW = datetime(2026, 12, 2, 1, 2, 3, 999999, tzinfo=UTC)
BIG = 1 << 30


def _worst_item(index: int) -> pb.EnqueueRequest:
    """An item whose repeated strings are as long as validation allows, in UTF-8
    characters of 3 bytes where the field takes them."""
    return pb.EnqueueRequest(
        job_type=pb.JOB_TYPE_CARD_ANALYSIS,
        target_id=f"{index:04d}" + "t" * (MAX_TARGET_ID_CHARS - 4),
        requested_by="사" * MAX_REQUESTED_BY_CHARS,
        request_id=f"{index:04d}" + "r" * (MAX_REQUEST_ID_CHARS - 4),
        max_attempts=MAX_ATTEMPTS_LIMIT,
        card_analysis_input=pb.CardAnalysisInput(text="x"),
    )


def _decoded(count: int) -> batch.DecodedBatch:
    request = pb.BatchEnqueueRequest(requests=[_worst_item(i) for i in range(count)])
    request.requests.add()  # one invalid item: its error is measured, not bounded
    return batch.decode(
        request, EnqueueLimits(), 3, requested_by=None, traceparent=None, answer_budget_bytes=BIG
    )


def _fresh(decoded: batch.DecodedBatch) -> list[EnqueueOutcome]:
    return [
        (pending_job(new_job_id(), new, NOW), False) for new in (item.job for item in decoded.items)
    ]


def test_the_items_are_valid_and_the_bound_counts_their_utf8_bytes() -> None:
    decoded = _decoded(3)
    assert len(decoded.items) == 3 and list(decoded.errors) == [3]
    strings = sum(
        len(n.target_id) + len(n.request_id or "") + 3 * len(n.requested_by)
        for n in (item.job for item in decoded.items)
    )
    errors = decoded.errors[3].ByteSize()
    assert batch.answer_bound_bytes(decoded) == (
        strings + 4 * batch.ANSWER_ITEM_OVERHEAD_BYTES + errors
    )


def test_every_outcome_the_store_can_give_fits_the_bound() -> None:
    """New jobs, duplicates and items the database refused, each at its largest."""
    decoded = _decoded(6)
    existing = new_job_id()
    outcomes: list[EnqueueOutcome] = _fresh(decoded)
    outcomes[1] = DuplicateJobError(existing)
    outcomes[2] = StorageDataError("value too long for type character varying(256) " * 50)
    outcomes[3] = StorageUnavailableError("connection reset " * 50)
    answer = batch.response(decoded, outcomes, {}, BIG)
    assert answer.results[1].error.code != 0 and answer.results[2].error.code != 0
    assert answer.ByteSize() <= batch.answer_bound_bytes(decoded)
    # Each entry alone, too (the bound is per item, not an average).
    for index, new in enumerate(item.job for item in decoded.items):
        repeated = len(new.target_id.encode()) + len(new.requested_by.encode())
        repeated += len((new.request_id or "").encode())
        entry = answer.results[index].ByteSize() + 4  # its tag and length
        assert entry <= repeated + batch.ANSWER_ITEM_OVERHEAD_BYTES, index


def test_a_batch_whose_answer_could_outgrow_the_limit_is_refused() -> None:
    request = pb.BatchEnqueueRequest(requests=[_worst_item(i) for i in range(100)])
    decoded = batch.decode(
        request, EnqueueLimits(), 3, requested_by=None, traceparent=None, answer_budget_bytes=BIG
    )
    bound = batch.answer_bound_bytes(decoded)
    try:
        batch.decode(
            request,
            EnqueueLimits(),
            3,
            requested_by=None,
            traceparent=None,
            answer_budget_bytes=bound - 1,
        )
    except batch.InvalidRequestError as error:
        (violation,) = error.violations
        assert violation.field == "requests"
        assert "batches of at most about 99" in violation.description
    else:
        raise AssertionError("a batch whose answer may not fit was accepted")


def _stored_big(new_job: object, index: int) -> object:
    """An existing job holding what no bound covers: a long result, many attempts."""
    job = pending_job(new_job_id(), new_job, NOW)  # type: ignore[arg-type]
    attempt = JobAttempt(
        attempt=1, start_time=NOW, end_time=NOW, error_code="UNAVAILABLE", error_message="e" * 900
    )
    return dataclasses.replace(
        job,
        status=JobStatus.COMPLETED,
        result={"summary": "s" * 5_000, "tags": [f"tag-{index}"]},
        attempts=(attempt,) * 5,
        attempt_count=5,
        completed_at=NOW,
        updated_at=NOW,
    )


def test_an_answer_over_the_limit_is_cut_to_job_identities_that_fit() -> None:
    decoded = _decoded(40)
    outcomes: list[EnqueueOutcome] = _fresh(decoded)
    for index in range(0, 40, 2):  # every other item: an existing, finished job
        outcomes[index] = (_stored_big(decoded.items[index].job, index), True)  # type: ignore[assignment]
    whole = batch.response(decoded, outcomes, {}, BIG)
    budget = batch.answer_bound_bytes(decoded)
    assert whole.ByteSize() > budget  # what the stored jobs bring is past the bound

    cut = batch.response(decoded, outcomes, {}, budget)

    assert cut.ByteSize() <= budget
    for index, result in enumerate(cut.results[:40]):
        job, deduplicated = outcomes[index]  # type: ignore[misc]
        got = result.response.job
        assert (got.id, got.target_id, got.request_id) == (job.id, job.target_id, job.request_id)
        assert got.status == (pb.JOB_STATUS_COMPLETED if deduplicated else pb.JOB_STATUS_PENDING)
        assert result.response.deduplicated == deduplicated
        assert got.create_time.ToDatetime(tzinfo=UTC) == NOW
        assert got.WhichOneof("result") is None and not got.attempts
    assert cut.results[40].HasField("error")  # the invalid item keeps its error


def test_an_answer_that_fits_is_not_cut() -> None:
    decoded = _decoded(4)
    outcomes: list[EnqueueOutcome] = _fresh(decoded)
    outcomes[0] = (_stored_big(decoded.items[0].job, 0), True)  # type: ignore[assignment]
    answer = batch.response(decoded, outcomes, {}, BIG)
    assert answer.results[0].response.job.card_analysis_result.summary == "s" * 5_000
    assert answer.results[1].response.job.requested_by == "사" * MAX_REQUESTED_BY_CHARS


def test_a_paused_type_s_waiting_for_is_cut_with_the_rest_when_over() -> None:
    decoded = _decoded(30)
    pause = DispatchPause(
        job_type=JobType.CARD_ANALYSIS,
        reason=PauseReason.CIRCUIT_OPEN,
        since=NOW,
        until=NOW,
        last_error="upstream said no " * 60,
        opened_by="instance-1",
    )
    pauses = {JobType.CARD_ANALYSIS: pause}
    whole = batch.response(decoded, _fresh(decoded), pauses, BIG)
    assert whole.results[0].response.job.HasField("waiting_for")
    budget = batch.answer_bound_bytes(decoded)
    assert whole.ByteSize() > budget
    cut = batch.response(decoded, _fresh(decoded), pauses, budget)
    assert cut.ByteSize() <= budget
    assert not cut.results[0].response.job.HasField("waiting_for")


def test_existing_jobs_found_by_the_other_key_lose_their_keys_when_still_over() -> None:
    """An item with a short target and request_id can be answered with an existing
    job found by its request_id whose target is long (or the other way round): beyond
    the bound even as an identity, so such jobs come without their keys."""
    request = pb.BatchEnqueueRequest(
        requests=[
            pb.EnqueueRequest(
                job_type=pb.JOB_TYPE_CARD_ANALYSIS,
                target_id=f"t{i}",
                request_id=f"r{i}",
                card_analysis_input=pb.CardAnalysisInput(text="x"),
            )
            for i in range(50)
        ]
    )
    decoded = batch.decode(
        request, EnqueueLimits(), 3, requested_by=None, traceparent=None, answer_budget_bytes=BIG
    )
    outcomes: list[EnqueueOutcome] = []
    for new in (item.job for item in decoded.items):
        stored = dataclasses.replace(
            pending_job(new_job_id(), new, NOW),
            target_id="가" * MAX_TARGET_ID_CHARS,
            request_id="나" * MAX_REQUEST_ID_CHARS,
        )
        outcomes.append((stored, True))
    budget = batch.answer_bound_bytes(decoded)
    assert batch.response(decoded, outcomes, {}, BIG).ByteSize() > budget

    cut = batch.response(decoded, outcomes, {}, budget)

    assert cut.ByteSize() <= budget
    for result, (job, _) in zip(cut.results, outcomes, strict=True):  # type: ignore[misc]
        got = result.response.job
        assert (got.id, got.status, got.target_id, got.request_id) == (
            job.id,
            pb.JOB_STATUS_PENDING,
            "",
            "",
        )
        assert result.response.deduplicated
