"""The input rules of each job type: what Enqueue checks in the input before a job
is stored. Each check is named by its type's entry in job_types.py.

A check is given the input's oneof field (`card_analysis_input`, ...) to name the bad
fields by their API path, the input as a JSON object (proto field names), the
operator's limits, and the list to append violations to; it reports every one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from san_jobs.job_service.domain.errors import FieldViolation
from san_jobs.job_service.domain.field_rules import (
    EnqueueLimits,
    check_count,
    check_free_text,
    check_identifier,
)
from san_jobs.job_service.domain.limits import (
    MAX_RECALL_SOURCES,
    MAX_TIL_NOTES,
    MAX_TITLE_CHARS,
    MAX_URL_CHARS,
)
from san_jobs.shared.input_rules import DEFAULT_QUESTION_COUNT, MAX_QUESTION_COUNT, day_problem

InputCheck = Callable[[str, Mapping[str, Any], EnqueueLimits, list[FieldViolation]], None]

# ASCII digits only: \d would take other scripts' digits too.


def check_card_analysis(
    field: str, params: Mapping[str, Any], limits: EnqueueLimits, out: list[FieldViolation]
) -> None:
    text = str(params.get("text", ""))
    check_free_text(f"{field}.text", text, limits.max_text_chars, out, required=True)
    check_identifier(f"{field}.url", str(params.get("url", "")), MAX_URL_CHARS, out)
    check_free_text(f"{field}.title", str(params.get("title", "")), MAX_TITLE_CHARS, out)


def check_til_generation(
    field: str, params: Mapping[str, Any], limits: EnqueueLimits, out: list[FieldViolation]
) -> None:
    day = str(params.get("day", ""))
    problem = day_problem(day)
    if problem == "format":
        out.append(FieldViolation(f"{field}.day", "must be a date as YYYY-MM-DD"))
    elif problem == "date":
        out.append(FieldViolation(f"{field}.day", f"{day} is not a real date"))
    notes = [str(n) for n in params.get("notes", [])]
    if not check_count(f"{field}.notes", len(notes), MAX_TIL_NOTES, out):
        return
    for index, note in enumerate(notes):
        check_free_text(f"{field}.notes[{index}]", note, limits.max_text_chars, out)
    if not any(n.strip() for n in notes):
        out.append(FieldViolation(f"{field}.notes", "at least one non-blank note is required"))
    total = sum(len(n) for n in notes)
    if total > limits.max_text_chars:
        out.append(
            FieldViolation(
                f"{field}.notes",
                f"hold {total} characters in all; at most {limits.max_text_chars} allowed",
            )
        )


def check_recall_generation(
    field: str, params: Mapping[str, Any], limits: EnqueueLimits, out: list[FieldViolation]
) -> None:
    sources = params.get("sources", [])
    if not sources:
        out.append(FieldViolation(f"{field}.sources", "at least one source is required"))
    if not check_count(f"{field}.sources", len(sources), MAX_RECALL_SOURCES, out):
        return
    total = 0
    for index, source in enumerate(sources):
        path = f"{field}.sources[{index}]"
        text = str(source.get("text", ""))
        total += len(text)
        check_free_text(f"{path}.text", text, limits.max_text_chars, out, required=True)
        check_free_text(f"{path}.title", str(source.get("title", "")), MAX_TITLE_CHARS, out)
    if total > limits.max_text_chars:
        out.append(
            FieldViolation(
                f"{field}.sources",
                f"hold {total} characters in all; at most {limits.max_text_chars} allowed",
            )
        )
    count = int(params.get("question_count", 0))
    if count < 0 or count > MAX_QUESTION_COUNT:
        out.append(
            FieldViolation(
                f"{field}.question_count",
                f"must be between 1 and {MAX_QUESTION_COUNT} "
                f"(0 means {DEFAULT_QUESTION_COUNT}); got {count}",
            )
        )


def check_embedding(
    field: str, params: Mapping[str, Any], limits: EnqueueLimits, out: list[FieldViolation]
) -> None:
    text = str(params.get("text", ""))
    check_free_text(f"{field}.text", text, limits.max_text_chars, out, required=True)
