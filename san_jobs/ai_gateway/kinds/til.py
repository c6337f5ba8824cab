"""GenerateTil: a "today I learned" note from a day's notes (JobService's TIL_GENERATION)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from san_jobs.ai_gateway.errors import FieldViolation, InvalidRequest, echo
from san_jobs.ai_gateway.kind import BLANK, Kind
from san_jobs.ai_gateway.usage import Usage
from san_jobs.shared.input_rules import day_problem


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
    usage: Usage | None = None  # None: counted by the gateway (see kind.py)


class TilRequest(Protocol):
    """What the gateway reads of a GenerateTilRequest."""

    day: str

    @property
    def notes(self) -> Sequence[str]: ...


def til_input(request: TilRequest) -> TilInput:
    """The validated input of GenerateTil."""
    bad: list[FieldViolation] = []
    if day_problem(request.day) is not None:
        bad.append(FieldViolation("day", f"must be a date as YYYY-MM-DD, got {echo(request.day)}"))
    if not request.notes:
        bad.append(FieldViolation("notes", "at least one note is required"))
    bad += [
        FieldViolation(f"notes[{i}]", BLANK) for i, n in enumerate(request.notes) if not n.strip()
    ]
    if bad:
        raise InvalidRequest(bad)
    return TilInput(day=request.day, notes=list(request.notes))


TIL: Kind[TilInput, TilResult]
TIL = Kind(
    method="GenerateTil",
    handler="generate_til",
    summary="A TIL note from a day's notes.",
    validate=til_input,
    input_texts=lambda data: data.notes,
    answer_texts=lambda result: [result.title, result.body],
)
