"""Input rules of every request. Field names are the API's (proto) field paths, so a
client can point at the bad field; every violation is reported, not just the first.

Two kinds of strings: identifier-like ones (ids, target_id, request_id,
requested_by, page_token, url) refuse every control character; free text refuses
only NUL, which PostgreSQL cannot store in text. Bounds live in limits.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

from job_service.domain.errors import FieldViolation
from job_service.domain.limits import (
    DAY_CHARS,
    DEFAULT_MAX_TEXT_CHARS,
    DEFAULT_QUESTION_COUNT,
    MAX_ATTEMPTS_LIMIT,
    MAX_QUESTION_COUNT,
    MAX_RECALL_SOURCES,
    MAX_REQUEST_ID_CHARS,
    MAX_REQUESTED_BY_CHARS,
    MAX_TARGET_ID_CHARS,
    MAX_TIL_NOTES,
    MAX_TITLE_CHARS,
    MAX_URL_CHARS,
)
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

# C0 and C1 control characters (Unicode category Cc).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# ASCII digits only: \d would take other scripts' digits too.
_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


@dataclass(frozen=True, slots=True)
class EnqueueLimits:
    """Limits an operator may tune (`--max-text-chars`)."""

    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS


def _too_long(length: int, max_chars: int) -> str:
    return f"is {length} characters long; at most {max_chars} allowed"


def check_identifier(
    field: str, value: str, max_chars: int, out: list[FieldViolation], *, required: bool = False
) -> bool:
    """Rules of an identifier-like string: at most `max_chars`, no control character,
    and not blank when `required`. Appends violations to `out`; True when none."""
    if len(value) > max_chars:
        out.append(FieldViolation(field, _too_long(len(value), max_chars)))
        return False
    match = _CONTROL.search(value)
    if match is not None:
        out.append(
            FieldViolation(
                field,
                f"must not contain control characters (found U+{ord(match.group()):04X} "
                f"at index {match.start()})",
            )
        )
        return False
    if required and not value.strip():
        out.append(FieldViolation(field, "is required and must not be blank"))
        return False
    return True


def check_free_text(
    field: str, value: str, max_chars: int, out: list[FieldViolation], *, required: bool = False
) -> bool:
    """Rules of a free-text string: at most `max_chars`, no NUL, and not blank when
    `required`. Appends violations to `out`; True when none."""
    if len(value) > max_chars:
        out.append(FieldViolation(field, _too_long(len(value), max_chars)))
        return False
    nul = value.find("\x00")
    if nul >= 0:
        out.append(FieldViolation(field, f"must not contain NUL characters (found at index {nul})"))
        return False
    if required and not value.strip():
        out.append(FieldViolation(field, "is required and must not be blank"))
        return False
    return True


def check_count(field: str, count: int, max_count: int, out: list[FieldViolation]) -> bool:
    """At most `max_count` items in a repeated field."""
    if count > max_count:
        out.append(FieldViolation(field, f"holds {count} items; at most {max_count} allowed"))
        return False
    return True


def _check_card(params: JsonDict, limits: EnqueueLimits, out: list[FieldViolation]) -> None:
    field = "card_analysis_input"
    text = str(params.get("text", ""))
    check_free_text(f"{field}.text", text, limits.max_text_chars, out, required=True)
    check_identifier(f"{field}.url", str(params.get("url", "")), MAX_URL_CHARS, out)
    check_free_text(f"{field}.title", str(params.get("title", "")), MAX_TITLE_CHARS, out)


def _check_til(params: JsonDict, limits: EnqueueLimits, out: list[FieldViolation]) -> None:
    day = str(params.get("day", ""))
    if len(day) != DAY_CHARS or not _DAY.fullmatch(day):
        out.append(FieldViolation("til_generation_input.day", "must be a date as YYYY-MM-DD"))
    else:
        try:
            date.fromisoformat(day)
        except ValueError:
            out.append(FieldViolation("til_generation_input.day", f"{day} is not a real date"))
    notes = [str(n) for n in params.get("notes", [])]
    if not check_count("til_generation_input.notes", len(notes), MAX_TIL_NOTES, out):
        return
    for index, note in enumerate(notes):
        check_free_text(f"til_generation_input.notes[{index}]", note, limits.max_text_chars, out)
    if not any(n.strip() for n in notes):
        out.append(
            FieldViolation("til_generation_input.notes", "at least one non-blank note is required")
        )
    total = sum(len(n) for n in notes)
    if total > limits.max_text_chars:
        out.append(
            FieldViolation(
                "til_generation_input.notes",
                f"hold {total} characters in all; at most {limits.max_text_chars} allowed",
            )
        )


def _check_recall(params: JsonDict, limits: EnqueueLimits, out: list[FieldViolation]) -> None:
    sources = params.get("sources", [])
    if not sources:
        out.append(
            FieldViolation("recall_generation_input.sources", "at least one source is required")
        )
    if not check_count("recall_generation_input.sources", len(sources), MAX_RECALL_SOURCES, out):
        return
    total = 0
    for index, source in enumerate(sources):
        field = f"recall_generation_input.sources[{index}]"
        text = str(source.get("text", ""))
        total += len(text)
        check_free_text(f"{field}.text", text, limits.max_text_chars, out, required=True)
        check_free_text(f"{field}.title", str(source.get("title", "")), MAX_TITLE_CHARS, out)
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
    check_identifier("target_id", target_id, MAX_TARGET_ID_CHARS, out, required=True)
    check_identifier("request_id", request_id, MAX_REQUEST_ID_CHARS, out)
    check_identifier("requested_by", requested_by, MAX_REQUESTED_BY_CHARS, out)
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
