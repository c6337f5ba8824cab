"""Request bounds without a server: page tokens, string rules, undecodable bytes,
and the size cut of ListJobs pages (issue 9, points 1, 4 and 5)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from san_jobs.job_service.domain.errors import FieldViolation, InvalidRequestError
from san_jobs.job_service.domain.model import Job, JobStatus, JobType
from san_jobs.job_service.domain.page_token import decode_page_token, encode_page_token
from san_jobs.job_service.domain.validation import check_free_text, check_identifier
from san_jobs.job_service.transport import requests
from san_jobs.job_service.transport.decoding import UndecodableRequest, lenient_deserializer
from san_jobs.job_service.transport.pages import encoded_entry_bytes, fit_page
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

JOB_ID = "3f1c3a9e-8a52-4d0e-9a55-2d2f0b6f7c11"
T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


def forged(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def test_page_token_round_trip() -> None:
    assert decode_page_token(encode_page_token(T0, JOB_ID)) == (T0, JOB_ID)


@pytest.mark.parametrize(
    "token",
    [
        "not-a-token!",
        "\x00",
        "A" * 513,
        forged([[["2025-01-01T00:00:00+00:00"]], {"a": 1}]),
        forged({"2025-01-01T00:00:00+00:00": JOB_ID}),
        forged(["0001-01-01T00:00:00+14:00", JOB_ID]),  # year 0 in UTC
        forged(["2025-01-01T00:00:00", JOB_ID]),  # no time zone
        forged(["2025-01-01T00:00:00+00:00", "\x00"]),
        forged(["2025-01-01T00:00:00+00:00", JOB_ID.upper()]),  # not what we make
        forged(["2025-01-01T00:00:00+00:00", JOB_ID, "more"]),
        base64.urlsafe_b64encode(b"[" * 380).decode(),
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
    ],
)
def test_malformed_page_tokens_are_invalid_argument_on_page_token(token: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        decode_page_token(token)
    assert [v.field for v in caught.value.violations] == ["page_token"]
    assert len(str(caught.value)) < 200  # the token is not echoed


def test_identifiers_refuse_control_characters_and_free_text_only_nul() -> None:
    out: list[FieldViolation] = []
    assert check_free_text("title", "a\nb\tc\x1b", 100, out)
    assert not check_free_text("title", "a\x00", 100, out)
    assert not check_identifier("target_id", "a\nb", 100, out)
    assert not check_identifier("target_id", "a\x9fb", 100, out)
    assert check_identifier("target_id", "scrap-1 (한국어)", 100, out)
    assert [v.field for v in out] == ["title", "target_id", "target_id"]
    assert "U+000A at index 1" in out[1].description


def test_long_values_are_not_echoed() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        requests.job_id("job_id", "x" * 1_000_000)
    assert len(str(caught.value)) < 200


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (pb.ListJobsRequest(created_after=Timestamp(seconds=10**12)), "created_after"),
        (pb.ListJobsRequest(created_before=Timestamp(seconds=-(10**12))), "created_before"),
        (pb.RetryFailedRequest(failed_before=Timestamp(nanos=10**9)), "failed_before"),
        (pb.RetryFailedRequest(failed_after=Timestamp(nanos=-1)), "failed_after"),
    ],
)
def test_timestamps_outside_their_range_name_the_field(request_: object, field: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        if isinstance(request_, pb.ListJobsRequest):
            requests.list_jobs(request_)
        else:
            assert isinstance(request_, pb.RetryFailedRequest)
            requests.retry_failed(request_)
    assert field in {v.field for v in caught.value.violations}


def test_undecodable_bytes_name_the_nested_field() -> None:
    deserialize = lenient_deserializer(pb.EnqueueRequest)
    good = pb.EnqueueRequest(
        target_id="t",
        recall_generation_input=pb.RecallGenerationInput(
            sources=[pb.RecallSource(text="aaa"), pb.RecallSource(title="bbb")]
        ),
    )
    raw = good.SerializeToString()
    assert deserialize(raw) == good
    bad = deserialize(raw.replace(b"bbb", b"b\xed\xa0"))
    assert isinstance(bad, UndecodableRequest)
    assert bad.violation.field == "recall_generation_input.sources[1].title"
    broken = deserialize(b"\x12\x50t")  # a length past the end
    assert isinstance(broken, UndecodableRequest) and broken.violation.field == "request"


def job(index: int, text: str) -> Job:
    moment = T0 - timedelta(seconds=index)
    return Job(
        id=f"00000000-0000-4000-8000-{index:012d}",
        job_type=JobType.CARD_ANALYSIS,
        status=JobStatus.PENDING,
        target_id=f"t{index}",
        request_params={"text": text},
        requested_by="",
        request_id=None,
        result=None,
        error_message=None,
        error_code=None,
        error_reason=None,
        attempt_count=0,
        max_attempts=3,
        created_at=moment,
        updated_at=moment,
        started_at=None,
        completed_at=None,
        failed_at=None,
        cancelled_at=None,
        cancel_reason=None,
        next_attempt_at=None,
        lease_expires_at=None,
        claim_token=None,
    )


def test_a_page_is_cut_where_the_next_job_would_pass_the_budget() -> None:
    jobs = [job(i, "x" * 1000) for i in range(5)]
    one = encoded_entry_bytes(fit_page(jobs[:1], None, 10**9).jobs[0])
    page = fit_page(jobs, "store-token", 3 * one + 10)
    assert [j.id for j in page.jobs] == [j.id for j in jobs[:3]]
    assert decode_page_token(page.next_page_token) == (jobs[2].created_at, jobs[2].id)
    assert page.ByteSize() <= 3 * one + 10 + len(page.next_page_token) + 2
    # Everything fits: the store's own token is kept.
    assert fit_page(jobs, "store-token", 10**9).next_page_token == "store-token"
    assert fit_page(jobs, None, 10**9).next_page_token == ""
    # A job alone over the budget still goes out alone, so paging moves on.
    alone = fit_page(jobs, None, 10)
    assert len(alone.jobs) == 1 and alone.next_page_token


def test_a_job_too_big_for_any_page_goes_out_without_its_input() -> None:
    """Issue 42, point 3: one job whose input was bigger than the send limit (a
    recall's merged input of 4.75 MB, stored before the merge was bounded) made every
    page reaching it RESOURCE_EXHAUSTED, so `jobsctl list --status failed` stayed broken."""
    big, small = job(0, "x" * 50_000), job(1, "y" * 100)
    page = fit_page([big, small], None, 10_000)
    assert [j.id for j in page.jobs] == [big.id, small.id]
    assert page.jobs[0].WhichOneof("input") is None  # its input left out, the rest kept
    assert page.jobs[0].target_id == big.target_id
    assert page.jobs[1].card_analysis_input.text == "y" * 100  # one that fits keeps it
    assert page.ByteSize() <= 10_000 + 2
    # Behind a job that fits, it ends the page and opens the next one, alone.
    behind = fit_page([small, big], None, 10_000)
    assert [j.id for j in behind.jobs] == [small.id]
    assert decode_page_token(behind.next_page_token) == (small.created_at, small.id)
