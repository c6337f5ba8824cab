"""The port every backend implements."""

from __future__ import annotations

from typing import Protocol

from san_jobs.ai_gateway.models import (
    AnalyzeInput,
    AnalyzeResult,
    EmbedInput,
    EmbedResult,
    RecallInput,
    RecallResult,
    TilInput,
    TilResult,
)


class Backend(Protocol):
    """A model backend. Inputs are already validated and within the token limit.

    ``time_left`` is the caller's remaining time in seconds (None: no deadline). A backend
    raises only :mod:`san_jobs.ai_gateway.errors` exceptions for expected failures; it may be
    cancelled at any await point when the caller goes away.
    """

    name: str

    async def analyze(self, request: AnalyzeInput, time_left: float | None) -> AnalyzeResult:
        """Summarise, tag and embed a text."""
        ...

    async def generate_til(self, request: TilInput, time_left: float | None) -> TilResult:
        """Write a TIL note from a day's notes."""
        ...

    async def generate_recall(self, request: RecallInput, time_left: float | None) -> RecallResult:
        """Make question/answer pairs grounded in the sources."""
        ...

    async def embed(self, request: EmbedInput, time_left: float | None) -> EmbedResult:
        """Embed a text: a unit-length vector of the model's dimension."""
        ...

    async def aclose(self) -> None:
        """Release connections and threads."""
        ...
