"""Enqueue's input rules. Field names are the API's (proto) field paths, so a
client can point at the bad field; every violation is reported, not just the first."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

from job_service.domain.errors import FieldViolation
from job_service.domain.model import JobType, JsonDict

INPUT_CASE_BY_TYPE: dict[JobType, str] = {
    JobType.CARD_ANALYSIS: "card_analysis_input",
    JobType.TIL_GENERATION: "til_generation_input",
    JobType.RECALL_GENERATION: "recall_generation_input",
}
RESULT_CASE_BY_TYPE: dict[JobType, str] = {
    JobType.CARD_ANALYSIS: "card_analysis_result",
    JobType.TIL_GENERATION: "til_generation_result",
    JobType.RECALL_GENERATION: "recall_generation_result",
}

DEFAULT_QUESTION_COUNT = 5
MAX_QUESTION_COUNT = 20
MAX_TARGET_ID_CHARS = 256
MAX_REQUEST_ID_CHARS = 256
MAX_REQUESTED_BY_CHARS = 256
MAX_ATTEMPTS_LIMIT = 100
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True, slots=True)
class EnqueueLimits:
    """Limits an operator may tune (`--max-text-chars`)."""

    max_text_chars: int = 100_000


def _check_text(field: str, text: str, limits: EnqueueLimits, out: list[FieldViolation]) -> None:
    if not text.strip():
        out.append(FieldViolation(field, "is required and must not be blank"))
    elif len(text) > limits.max_text_chars:
        out.append(
            FieldViolation(
                field, f"is {len(text)} characters long; at most {limits.max_text_chars} allowed"
            )
        )


def _check_card(params: JsonDict, limits: EnqueueLimits, out: list[FieldViolation]) -> None:
    _check_text("card_analysis_input.text", str(params.get("text", "")), limits, out)


def _check_til(params: JsonDict, limits: EnqueueLimits, out: list[FieldViolation]) -> None:
    day = str(params.get("day", ""))
    if not _DAY.match(day):
        out.append(FieldViolation("til_generation_input.day", "must be a date as YYYY-MM-DD"))
    else:
        try:
            date.fromisoformat(day)
        except ValueError:
            out.append(FieldViolation("til_generation_input.day", f"{day} is not a real date"))
    notes = [str(n) for n in params.get("notes", [])]
    if not any(n.strip() for n in notes):
        out.append(
            FieldViolation("til_generation_input.notes", "at least one non-blank note is required")
        )
    if sum(len(n) for n in notes) > limits.max_text_chars:
        out.append(
            FieldViolation(
                "til_generation_input.notes",
                f"hold more than {limits.max_text_chars} characters in all",
            )
        )


def _check_recall(params: JsonDict, limits: EnqueueLimits, out: list[FieldViolation]) -> None:
    sources = params.get("sources", [])
    if not sources:
        out.append(
            FieldViolation("recall_generation_input.sources", "at least one source is required")
        )
    total = 0
    for index, source in enumerate(sources):
        text = str(source.get("text", ""))
        total += len(text)
        if not text.strip():
            out.append(
                FieldViolation(
                    f"recall_generation_input.sources[{index}].text",
                    "is required and must not be blank",
                )
            )
    if total > limits.max_text_chars:
        out.append(
            FieldViolation(
                "recall_generation_input.sources",
                f"hold {total} characters in all; at most {limits.max_text_chars} allowed",
            )
        )
    count = int(params.get("question_count", 0))
    if count < 0 or count > MAX_QUESTION_COUNT:
        out.append(
            FieldViolation(
                "recall_generation_input.question_count",
                f"must be between 1 and {MAX_QUESTION_COUNT} "
                f"(0 means {DEFAULT_QUESTION_COUNT}); got {count}",
            )
        )


_INPUT_CHECKS = {
    JobType.CARD_ANALYSIS: _check_card,
    JobType.TIL_GENERATION: _check_til,
    JobType.RECALL_GENERATION: _check_recall,
}


def validate_enqueue(
    *,
    job_type: JobType | None,
    target_id: str,
    input_case: str | None,
    params: JsonDict,
    requested_by: str,
    request_id: str,
    max_attempts: int,
    limits: EnqueueLimits,
) -> list[FieldViolation]:
    """Every rule Enqueue enforces; an empty list means the job may be stored.
    `job_type` is None when the request's value was unspecified or unknown (the
    transport layer reports that violation itself)."""
    out: list[FieldViolation] = []
    if not target_id.strip():
        out.append(FieldViolation("target_id", "is required and must not be blank"))
    elif len(target_id) > MAX_TARGET_ID_CHARS:
        out.append(
            FieldViolation(
                "target_id",
                f"is {len(target_id)} characters long; at most {MAX_TARGET_ID_CHARS} allowed",
            )
        )
    if len(request_id) > MAX_REQUEST_ID_CHARS:
        out.append(
            FieldViolation("request_id", f"at most {MAX_REQUEST_ID_CHARS} characters allowed")
        )
    if len(requested_by) > MAX_REQUESTED_BY_CHARS:
        out.append(
            FieldViolation("requested_by", f"at most {MAX_REQUESTED_BY_CHARS} characters allowed")
        )
    if max_attempts < 0 or max_attempts > MAX_ATTEMPTS_LIMIT:
        out.append(
            FieldViolation(
                "max_attempts", f"must be between 1 and {MAX_ATTEMPTS_LIMIT} (0 means the default)"
            )
        )
    if job_type is None:
        return out
    expected = INPUT_CASE_BY_TYPE[job_type]
    if input_case is None:
        out.append(FieldViolation(expected, f"is required for {job_type.value} jobs"))
    elif input_case != expected:
        out.append(
            FieldViolation(
                input_case, f"does not match job_type {job_type.value}; set {expected} instead"
            )
        )
    else:
        _INPUT_CHECKS[job_type](params, limits, out)
    return out
