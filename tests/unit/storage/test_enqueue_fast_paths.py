"""The enqueue path's hand-built values equal what the generic code builds: the
decoded NewJob and the pending Job (requests.new_job, rows.pending_job: slots set
directly) and the INSERT's JSON row (writes.enqueue_row skips Rows.row)."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from san_jobs.job_service.domain import job_ids
from san_jobs.job_service.domain.job_types import JOB_TYPES
from san_jobs.job_service.domain.model import (
    Job,
    JobDraft,
    JobStatus,
    JobType,
    NewJob,
    OnDuplicate,
)
from san_jobs.job_service.domain.ports import EnqueueParams
from san_jobs.job_service.domain.validation import EnqueueLimits
from san_jobs.job_service.storage.enqueue_conflicts import enqueue_row
from san_jobs.job_service.storage.rows import pending_job
from san_jobs.job_service.storage.statements import Statements
from san_jobs.job_service.transport import requests
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

NOW = datetime(2025, 3, 1, 12, 30, 15, 123456, tzinfo=UTC)
JOB_ID = "0190b1c2-1234-7abc-8def-0123456789ab"

NEW_JOBS = [
    NewJob(JobType.CARD_ANALYSIS, "scrap-1", {"text": "hello"}, "alice", None, 3),
    NewJob(
        JobType.TIL_GENERATION,
        "사용자-7",
        {"date": "2025-03-01", "nested": {"list": [1, "둘", None]}},
        "bob",
        "req-9",
        7,
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    ),
    NewJob(JobType.CARD_ANALYSIS, 't\n"quoted"', {}, "", "", 1),
]


def constructed(job_id: str, new: NewJob, now: datetime) -> Job:
    """The pending job through the dataclass's own __init__."""
    return Job(
        id=job_id,
        job_type=new.job_type,
        status=JobStatus.PENDING,
        target_id=new.target_id,
        request_params=new.request_params,
        requested_by=new.requested_by,
        request_id=new.request_id,
        result=None,
        error_message=None,
        error_code=None,
        error_reason=None,
        attempt_count=0,
        max_attempts=new.max_attempts,
        created_at=now,
        updated_at=now,
        started_at=None,
        completed_at=None,
        failed_at=None,
        cancelled_at=None,
        cancel_reason=None,
        next_attempt_at=None,
        lease_expires_at=None,
        claim_token=None,
        attempts=(),
        traceparent=new.traceparent,
    )


@pytest.mark.parametrize("new", NEW_JOBS)
def test_pending_job_equals_the_constructed_job(new: NewJob) -> None:
    built = pending_job(JOB_ID, new, NOW)
    expected = constructed(JOB_ID, new, NOW)
    assert built == expected
    assert repr(built) == repr(expected)
    assert hash(built.id) == hash(expected.id)
    for name in Job.__dataclass_fields__:
        assert getattr(built, name) == getattr(expected, name), name


def test_pending_job_stays_frozen() -> None:
    job = pending_job(JOB_ID, NEW_JOBS[0], NOW)
    with pytest.raises(AttributeError):
        job.status = JobStatus.FAILED  # type: ignore[misc]


@pytest.mark.parametrize("postgres", [False, True], ids=["sqlite", "postgres"])
@pytest.mark.parametrize("new", NEW_JOBS)
def test_enqueue_row_equals_the_generic_row(postgres: bool, new: NewJob) -> None:
    """The same fields, but request_params as the object rather than its JSON text
    (writes.enqueue_row says why)."""
    generic = Statements(postgres, "test").enqueue_rows.row(**enqueue_row(JOB_ID, new))
    row = enqueue_row(JOB_ID, new)
    assert row.keys() == generic.keys()
    assert row["request_params"] == json.loads(generic["request_params"])
    assert {**row, "request_params": None} == {**generic, "request_params": None}


def draft_of(new: NewJob) -> JobDraft:
    """The draft a request decodes to when it asks for `new` (no defaults left)."""
    return JobDraft(
        new.job_type,
        JOB_TYPES[new.job_type].input_field,
        new.request_params,
        new.target_id,
        new.requested_by,
        new.request_id or "",
        new.max_attempts,
        new.priority,
        new.depends_on,
    )


@pytest.mark.parametrize("new", NEW_JOBS)
@pytest.mark.parametrize("caller", [None, "carol-svc"])
def test_decoded_new_job_equals_the_constructed_one(new: NewJob, caller: str | None) -> None:
    """requests.new_job (Enqueue's decoding) sets NewJob's slots directly."""
    built = requests.new_job(draft_of(new), 5, caller=caller, traceparent=new.traceparent)
    expected = replace(new, request_id=new.request_id or None)
    if caller is not None:
        expected = replace(expected, requested_by=caller, tenant=caller)
    assert built == expected
    assert repr(built) == repr(expected)
    with pytest.raises(AttributeError):
        built.target_id = "other"  # type: ignore[misc]


def test_decoded_enqueue_params_equal_the_constructed_ones() -> None:
    """requests.enqueue sets EnqueueParams' slots directly too."""
    request = pb.EnqueueRequest(
        job_type=pb.JOB_TYPE_CARD_ANALYSIS,
        target_id="scrap-1",
        requested_by="alice",
        on_duplicate=pb.ON_DUPLICATE_RETURN_EXISTING,
        card_analysis_input=pb.CardAnalysisInput(text="hello"),
    )
    built = requests.enqueue(request, EnqueueLimits(), 3)
    expected = EnqueueParams(NEW_JOBS[0], OnDuplicate.RETURN_EXISTING)
    assert built == expected
    assert repr(built) == repr(expected)
    with pytest.raises(AttributeError):
        built.on_duplicate = OnDuplicate.REJECT  # type: ignore[misc]


def test_decoded_new_job_fills_in_the_defaults() -> None:
    draft = replace(draft_of(NEW_JOBS[0]), max_attempts=0, priority=0)
    built = requests.new_job(draft, 5)
    assert built == replace(NEW_JOBS[0], max_attempts=5, priority=3)


def test_ids_made_together_are_as_ids_made_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """job_ids.new_job_ids (an INSERT chunk's ids): canonical UUIDv7s, increasing
    within the batch and after the ids before it, all in the clock's millisecond
    while it stands still (the counter counts them); random bits differ."""
    monkeypatch.setattr(time, "time_ns", lambda: 1_700_000_000_000_000_000)
    monkeypatch.setattr(job_ids, "_last_milliseconds", -1)
    before = job_ids.new_job_id()
    batch = job_ids.new_job_ids(500)
    after = job_ids.new_job_id()
    assert [before, *batch, after] == sorted({before, *batch, after})
    for text in batch:
        value = uuid.UUID(text)
        assert str(value) == text
        assert value.version == 7
        assert value.variant == uuid.RFC_4122
    times = [uuid.UUID(text).int >> 80 for text in [before, *batch, after]]
    assert times == [1_700_000_000_000] * 502
    randoms = {uuid.UUID(text).int & ((1 << 62) - 1) for text in batch}
    assert len(randoms) == 500


def test_ids_made_together_follow_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(job_ids, "_last_milliseconds", -1)
    before = time.time_ns() // 1_000_000
    first, *_ = job_ids.new_job_ids(3)
    assert before <= uuid.UUID(first).int >> 80 <= before + 1_000
