"""GenerateRecall: question/answer pairs grounded in the sources (JobService's
RECALL_GENERATION)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from san_jobs.ai_gateway.errors import FieldViolation, InvalidRequest
from san_jobs.ai_gateway.kind import BLANK, Kind
from san_jobs.ai_gateway.usage import Usage
from san_jobs.shared.input_rules import (
    DEFAULT_QUESTION_COUNT,
    MAX_KEY_TERM_CHARS,
    MAX_KEY_TERMS,
    MAX_QUESTION_COUNT,
)


@dataclass(frozen=True)
class RecallSource:
    """One text to ask questions about."""

    title: str
    text: str
    # Its key terms, most telling first (a card's tags): blanked before other words.
    key_terms: tuple[str, ...] = ()


@dataclass(frozen=True)
class RecallInput:
    """Sources and how many questions to make (already defaulted and bounded)."""

    sources: list[RecallSource]
    question_count: int


@dataclass(frozen=True)
class RecallQuestion:
    """A question, its answer, and the index of the source it came from."""

    question: str
    answer: str
    source_index: int


@dataclass(frozen=True)
class RecallResult:
    """Recall questions in order."""

    questions: list[RecallQuestion]
    model: str
    usage: Usage | None = None  # None: counted by the gateway (see kind.py)


class SourceMessage(Protocol):
    """What the gateway reads of a Source."""

    title: str
    text: str

    @property
    def key_terms(self) -> Sequence[str]: ...


class RecallRequest(Protocol):
    """What the gateway reads of a GenerateRecallRequest."""

    question_count: int

    @property
    def sources(self) -> Sequence[SourceMessage]: ...


def recall_input(request: RecallRequest) -> RecallInput:
    """The validated input of GenerateRecall (question_count 0 becomes 5)."""
    bad: list[FieldViolation] = []
    if not request.sources:
        bad.append(FieldViolation("sources", "at least one source is required"))
    bad += [
        FieldViolation(f"sources[{i}].text", BLANK)
        for i, s in enumerate(request.sources)
        if not s.text.strip()
    ]
    for i, s in enumerate(request.sources):
        if len(s.key_terms) > MAX_KEY_TERMS:
            bad.append(
                FieldViolation(
                    f"sources[{i}].key_terms",
                    f"holds {len(s.key_terms)} items; at most {MAX_KEY_TERMS} allowed",
                )
            )
        bad += [
            FieldViolation(
                f"sources[{i}].key_terms[{n}]",
                f"must be 1 to {MAX_KEY_TERM_CHARS} characters, not blank",
            )
            for n, term in enumerate(s.key_terms[:MAX_KEY_TERMS])
            if not term.strip() or len(term) > MAX_KEY_TERM_CHARS
        ]
    if not 0 <= request.question_count <= MAX_QUESTION_COUNT:
        bad.append(
            FieldViolation(
                "question_count",
                f"must be from 0 (meaning {DEFAULT_QUESTION_COUNT}) to {MAX_QUESTION_COUNT}, "
                f"got {request.question_count}",
            )
        )
    if bad:
        raise InvalidRequest(bad)
    return RecallInput(
        sources=[RecallSource(s.title, s.text, tuple(s.key_terms)) for s in request.sources],
        question_count=request.question_count or DEFAULT_QUESTION_COUNT,
    )


RECALL: Kind[RecallInput, RecallResult]
RECALL = Kind(
    method="GenerateRecall",
    handler="generate_recall",
    summary="Question/answer pairs grounded in the sources.",
    validate=recall_input,
    input_texts=lambda data: [t for s in data.sources for t in (s.title, s.text)],
    answer_texts=lambda result: [t for q in result.questions for t in (q.question, q.answer)],
)
