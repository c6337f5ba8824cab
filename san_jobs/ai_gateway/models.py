"""Plain request/answer types shared by the servicer and the backends (no protobuf)."""

from __future__ import annotations

from dataclasses import dataclass

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
    # What the provider says the call consumed (the openai backend reads its `usage`),
    # or a cached answer's mark; None: the gateway counts with its tokenizer (calls.py).
    usage: Usage | None = None


@dataclass(frozen=True)
class TilInput:
    """One day's notes."""

    day: str
    notes: list[str]


@dataclass(frozen=True)
class TilResult:
    """A "today I learned" note."""

    title: str
    body: str
    model: str
    # What the provider says the call consumed (the openai backend reads its `usage`),
    # or a cached answer's mark; None: the gateway counts with its tokenizer (calls.py).
    usage: Usage | None = None


@dataclass(frozen=True)
class RecallSource:
    """One text to ask questions about."""

    title: str
    text: str


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
    # What the provider says the call consumed (the openai backend reads its `usage`),
    # or a cached answer's mark; None: the gateway counts with its tokenizer (calls.py).
    usage: Usage | None = None


@dataclass(frozen=True)
class EmbedInput:
    """A text to embed."""

    text: str


@dataclass(frozen=True)
class EmbedResult:
    """A unit-length embedding, of the model's dimension."""

    vector: list[float]
    model: str
    # What the provider says the call consumed (the openai backend reads its `usage`),
    # or a cached answer's mark; None: the gateway counts with its tokenizer (calls.py).
    usage: Usage | None = None
