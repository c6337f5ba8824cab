"""Embed: the embedding of a text (JobService's EMBEDDING)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from san_jobs.ai_gateway.errors import FieldViolation, InvalidRequest
from san_jobs.ai_gateway.kind import BLANK, Kind
from san_jobs.ai_gateway.usage import Usage


@dataclass(frozen=True)
class EmbedInput:
    """A text to embed."""

    text: str


@dataclass(frozen=True)
class EmbedResult:
    """A unit-length embedding, of the model's dimension."""

    vector: list[float]
    model: str
    usage: Usage | None = None  # None: counted by the gateway (see kind.py)


class EmbedRequest(Protocol):
    """What the gateway reads of an EmbedRequest."""

    text: str


def embed_input(request: EmbedRequest) -> EmbedInput:
    """The validated input of Embed."""
    if not request.text.strip():
        raise InvalidRequest([FieldViolation("text", BLANK)])
    return EmbedInput(text=request.text)


EMBED: Kind[EmbedInput, EmbedResult]
EMBED = Kind(
    method="Embed",
    handler="embed",
    summary="The embedding of a text.",
    validate=embed_input,
    input_texts=lambda data: [data.text],
    # A vector has no text: only the input is counted.
    answer_texts=lambda result: [],
)
