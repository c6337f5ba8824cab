"""Enqueue's input rules, each reported with the bad field named."""

from __future__ import annotations

import pytest

from san_jobs.job_service.domain.errors import InvalidRequestError
from san_jobs.job_service.domain.model import JobType, OnDuplicate
from san_jobs.job_service.domain.validation import EnqueueLimits
from san_jobs.job_service.transport import requests
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

LIMITS = EnqueueLimits(max_text_chars=100)


def card(**kwargs: object) -> pb.EnqueueRequest:
    base: dict[str, object] = {
        "job_type": pb.JOB_TYPE_CARD_ANALYSIS,
        "target_id": "scrap-1",
        "card_analysis_input": pb.CardAnalysisInput(text="Some text."),
    }
    base.update(kwargs)
    return pb.EnqueueRequest(**base)  # type: ignore[arg-type]


def fields(request: pb.EnqueueRequest) -> dict[str, str]:
    with pytest.raises(InvalidRequestError) as caught:
        requests.enqueue(request, LIMITS, 3)
    return {v.field: v.description for v in caught.value.violations}


def test_valid_card_request() -> None:
    enqueued = requests.enqueue(
        card(
            card_analysis_input=pb.CardAnalysisInput(text="Some text.", url="https://x", title="T")
        ),
        LIMITS,
        3,
    )
    new, on_duplicate = enqueued.job, enqueued.on_duplicate
    assert new.job_type is JobType.CARD_ANALYSIS
    assert new.request_params == {"text": "Some text.", "url": "https://x", "title": "T"}
    assert new.max_attempts == 3
    assert new.request_id is None
    assert on_duplicate is OnDuplicate.REJECT


def test_unspecified_job_type() -> None:
    assert fields(card(job_type=pb.JOB_TYPE_UNSPECIFIED))["job_type"] == "is required"


def test_unknown_enum_numbers() -> None:
    bad = fields(card(job_type=99, on_duplicate=7))
    assert bad["job_type"] == "unknown value 99"
    assert bad["on_duplicate"] == "unknown value 7"


@pytest.mark.parametrize("target_id", ["", "   ", "x" * 257])
def test_bad_target_id(target_id: str) -> None:
    assert "target_id" in fields(card(target_id=target_id))


def test_target_id_of_256_characters_is_fine() -> None:
    new = requests.enqueue(card(target_id="t" * 256), LIMITS, 3).job
    assert len(new.target_id) == 256


def test_input_case_must_match_type() -> None:
    request = pb.EnqueueRequest(
        job_type=pb.JOB_TYPE_CARD_ANALYSIS,
        target_id="x",
        til_generation_input=pb.TilGenerationInput(day="2026-11-29", notes=["a"]),
    )
    assert "does not match job_type CARD_ANALYSIS" in fields(request)["til_generation_input"]


def test_missing_input() -> None:
    request = pb.EnqueueRequest(job_type=pb.JOB_TYPE_CARD_ANALYSIS, target_id="x")
    assert "card_analysis_input" in fields(request)


def test_text_over_the_limit_and_blank() -> None:
    assert (
        "101 characters"
        in fields(card(card_analysis_input=pb.CardAnalysisInput(text="x" * 101)))[
            "card_analysis_input.text"
        ]
    )
    assert "card_analysis_input.text" in fields(
        card(card_analysis_input=pb.CardAnalysisInput(text=" \n"))
    )


def test_til_needs_notes_and_a_real_day() -> None:
    request = pb.EnqueueRequest(
        job_type=pb.JOB_TYPE_TIL_GENERATION,
        target_id="2026-02-30",
        til_generation_input=pb.TilGenerationInput(day="2026-02-30", notes=[]),
    )
    bad = fields(request)
    assert "til_generation_input.notes" in bad
    assert "not a real date" in bad["til_generation_input.day"]


@pytest.mark.parametrize("count", [-1, 21])
def test_question_count_out_of_range(count: int) -> None:
    request = pb.EnqueueRequest(
        job_type=pb.JOB_TYPE_RECALL_GENERATION,
        target_id="deck-1",
        recall_generation_input=pb.RecallGenerationInput(
            sources=[pb.RecallSource(title="t", text="body")], question_count=count
        ),
    )
    assert "recall_generation_input.question_count" in fields(request)


def test_every_violation_is_reported_at_once() -> None:
    bad = fields(card(job_type=pb.JOB_TYPE_UNSPECIFIED, target_id="", max_attempts=-1))
    assert {"job_type", "target_id", "max_attempts"} <= set(bad)


def test_job_id_must_be_a_uuid() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        requests.job_id("job_id", "not-a-uuid")
    assert caught.value.violations[0].field == "job_id"


def test_retry_failed_needs_a_criterion() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        requests.retry_failed(pb.RetryFailedRequest())
    assert caught.value.violations[0].field == "all_failed"
    job_filter, limit = requests.retry_failed(pb.RetryFailedRequest(all_failed=True))
    assert limit == 1000
    assert job_filter.statuses


def test_retry_failed_limit_bounds() -> None:
    with pytest.raises(InvalidRequestError):
        requests.retry_failed(pb.RetryFailedRequest(all_failed=True, limit=10_001))


def test_filters_reject_unspecified_and_unknown_enum_numbers() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        requests.list_jobs(pb.ListJobsRequest(statuses=[pb.JOB_STATUS_FAILED, 99], job_types=[0]))
    bad = {v.field: v.description for v in caught.value.violations}
    assert bad == {
        "statuses[1]": "unspecified or unknown status 99",
        "job_types[0]": "unspecified or unknown job type 0",
    }
    with pytest.raises(InvalidRequestError) as caught:
        requests.stream(pb.StreamJobUpdatesRequest(job_ids=["nope"], statuses=[0]))
    assert {v.field for v in caught.value.violations} == {"job_ids[0]", "statuses[0]"}


def test_a_recall_sources_key_terms_are_bounded() -> None:
    def recall(*terms: str) -> pb.EnqueueRequest:
        source = pb.RecallSource(title="T", text="Some text.", key_terms=list(terms))
        return pb.EnqueueRequest(
            job_type=pb.JOB_TYPE_RECALL_GENERATION,
            target_id="day",
            recall_generation_input=pb.RecallGenerationInput(sources=[source]),
        )

    new = requests.enqueue(recall("fencing tokens", "lease"), LIMITS, 3).job
    assert new.request_params["sources"][0]["key_terms"] == ["fencing tokens", "lease"]
    too_many = fields(recall(*[f"t{i}" for i in range(21)]))
    assert set(too_many) == {"recall_generation_input.sources[0].key_terms"}
    bad = fields(recall("ok", " ", "x" * 101, "a\x00b"))
    assert set(bad) == {f"recall_generation_input.sources[0].key_terms[{i}]" for i in (1, 2, 3)}
