"""AnalyzeContent: summary, tags and embedding of a text (JobService's CARD_ANALYSIS)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from san_jobs.ai_gateway.errors import FieldViolation, InvalidRequest
from san_jobs.ai_gateway.kind import BLANK, Kind
from san_jobs.ai_gateway.usage import Usage


@dataclass(frozen=True)
class AnalyzeInput:
    """A text to summarise, tag and embed."""

    text: str
    url: str = ""
    title: str = ""


@dataclass(frozen=True)
class AnalyzeResult:
    """Summary, tags and a unit-length embedding."""

    summary: str
    tags: list[str]
    embedding: list[float]
    model: str
    usage: Usage | None = None  # None: counted by the gateway (see kind.py)


class AnalyzeRequest(Protocol):
    """What the gateway reads of an AnalyzeContentRequest."""

    text: str
    url: str
    title: str


def analyze_input(request: AnalyzeRequest) -> AnalyzeInput:
    """The validated input of AnalyzeContent."""
    if not request.text.strip():
        raise InvalidRequest([FieldViolation("text", BLANK)])
    return AnalyzeInput(text=request.text, url=request.url, title=request.title)


ANALYZE: Kind[AnalyzeInput, AnalyzeResult]
ANALYZE = Kind(
    method="AnalyzeContent",
    handler="analyze",
    summary="Summary, tags and embedding of a text.",
    validate=analyze_input,
    input_texts=lambda data: [data.title, data.text],
    answer_texts=lambda result: [result.summary, *result.tags],
)
