"""An identifier (target_id, request_id, requested_by, a list's target_id) holding a
Unicode format character (U+202E RIGHT-TO-LEFT OVERRIDE, a zero-width space or joiner,
a BOM) is refused as INVALID_ARGUMENT naming the field; free text keeps them (a ZWJ
joins an emoji)."""

from __future__ import annotations

import pytest

from san_jobs.job_service.domain.errors import InvalidRequestError
from san_jobs.job_service.domain.validation import EnqueueLimits
from san_jobs.job_service.transport import requests
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

LIMITS = EnqueueLimits(max_text_chars=1000)


def card(**kwargs: object) -> pb.EnqueueRequest:
    base: dict[str, object] = {
        "job_type": pb.JOB_TYPE_CARD_ANALYSIS,
        "target_id": "scrap-1",
        "card_analysis_input": pb.CardAnalysisInput(text="Some text."),
    }
    base.update(kwargs)
    return pb.EnqueueRequest(**base)  # type: ignore[arg-type]


def violations(request: pb.EnqueueRequest) -> dict[str, str]:
    with pytest.raises(InvalidRequestError) as caught:
        requests.enqueue(request, LIMITS, 3)
    return {v.field: v.description for v in caught.value.violations}


@pytest.mark.parametrize("char", ["\u202e", "\u2066", "\u200b", "\u200d", "\ufeff", "\U000e0041"])
@pytest.mark.parametrize("field", ["target_id", "request_id", "requested_by"])
def test_a_format_character_in_an_identifier_is_refused(field: str, char: str) -> None:
    bad = violations(card(**{field: f"scrap{char}-1"}))
    assert bad == {
        field: f"must not contain control or format characters (found U+{ord(char):04X} at index 5)"
    }


def test_list_and_retry_filters_refuse_them_the_same() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        requests.list_jobs(pb.ListJobsRequest(target_id="a\u202eb"))
    assert [v.field for v in caught.value.violations] == ["target_id"]
    with pytest.raises(InvalidRequestError) as caught:
        requests.retry_failed(pb.RetryFailedRequest(target_ids=["ok", "a\u202eb"]))
    assert [v.field for v in caught.value.violations] == ["target_ids[1]"]


def test_free_text_keeps_format_characters() -> None:
    text = "\U0001f469\u200d\U0001f4bb learned \u202ebidi\u202c today"
    new = requests.enqueue(card(card_analysis_input=pb.CardAnalysisInput(text=text)), LIMITS, 3).job
    assert new.request_params["text"] == text
