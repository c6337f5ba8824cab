"""JobService (at Enqueue) and AiGateway (at the call) accept exactly the same TIL days
and recall question counts: both read san_jobs.shared.input_rules."""

from __future__ import annotations

import pytest

from san_jobs.ai_gateway.errors import InvalidRequest
from san_jobs.ai_gateway.validation import recall_input, til_input
from san_jobs.job_service.domain.errors import FieldViolation
from san_jobs.job_service.domain.field_rules import EnqueueLimits
from san_jobs.job_service.domain.job_types import check_recall_generation, check_til_generation
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2 as gw

DAYS = ["2026-12-02", "2024-02-29", "2026-02-30", "2026-1-02", "٢٠٢٦-١٢-٠٢", "", "2026-12-02x"]
COUNTS = [-1, 0, 1, 20, 21]


def _job_service_accepts_day(day: str) -> bool:
    out: list[FieldViolation] = []
    check_til_generation("til", {"day": day, "notes": ["a note"]}, EnqueueLimits(), out)
    return not out


def _gateway_accepts_day(day: str) -> bool:
    try:
        til_input(gw.GenerateTilRequest(day=day, notes=["a note"]))
    except InvalidRequest:
        return False
    return True


@pytest.mark.parametrize("day", DAYS)
def test_both_services_agree_on_a_day(day: str) -> None:
    assert _job_service_accepts_day(day) == _gateway_accepts_day(day)


def test_the_days_accepted_are_real_dates_in_ascii_digits() -> None:
    assert [d for d in DAYS if _gateway_accepts_day(d)] == ["2026-12-02", "2024-02-29"]


@pytest.mark.parametrize("count", COUNTS)
def test_both_services_agree_on_a_question_count(count: int) -> None:
    out: list[FieldViolation] = []
    params = {"sources": [{"title": "t", "text": "a source"}], "question_count": count}
    check_recall_generation("recall", params, EnqueueLimits(), out)
    source = gw.Source(title="t", text="a source")
    try:
        recall_input(gw.GenerateRecallRequest(sources=[source], question_count=count))
        gateway_accepts = True
    except InvalidRequest:
        gateway_accepts = False
    assert (not out) == gateway_accepts == (0 <= count <= 20)
