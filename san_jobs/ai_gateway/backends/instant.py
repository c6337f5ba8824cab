"""The ``instant`` backend: for benchmarks and tests only.

It answers at once with a minimal valid reply and no real analysis, so the cost of
everything around the model (JobService, queues, gRPC) can be measured on its own.
"""

from __future__ import annotations

import re

from san_jobs.ai_gateway.kinds.analyze import AnalyzeInput, AnalyzeResult
from san_jobs.ai_gateway.kinds.embed import EmbedInput, EmbedResult
from san_jobs.ai_gateway.kinds.recall import RecallInput, RecallQuestion, RecallResult
from san_jobs.ai_gateway.kinds.til import TilInput, TilResult

MODEL = "instant"
EMBEDDING = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
_FIRST_SENTENCE = re.compile(r"\S.*?(?:[.!?](?=\s)|$)", re.DOTALL)
_FIRST_WORD = re.compile(r"\w+")


def _first_sentence(text: str) -> str:
    found = _FIRST_SENTENCE.search(text[:1000])
    return found.group(0).strip() if found else text.strip()[:200]


class InstantBackend:
    """Minimal answers with no work: first sentence, first word, a fixed unit vector."""

    name = "instant"

    async def analyze(self, request: AnalyzeInput, time_left: float | None) -> AnalyzeResult:
        """The first sentence, one tag (the first word), a fixed 8-dimension embedding."""
        word = _FIRST_WORD.search(request.text)
        return AnalyzeResult(
            summary=_first_sentence(request.text),
            tags=[word.group(0).lower() if word else "text"],
            embedding=list(EMBEDDING),
            model=MODEL,
        )

    async def generate_til(self, request: TilInput, time_left: float | None) -> TilResult:
        """The notes as a bullet list."""
        body = "\n".join(f"- {' '.join(n.split())}" for n in request.notes) + "\n"
        return TilResult(title=f"TIL {request.day}", body=body, model=MODEL)

    async def generate_recall(self, request: RecallInput, time_left: float | None) -> RecallResult:
        """One question per source (up to the count): its title, answered by its first sentence."""
        questions = [
            RecallQuestion(
                f"What does '{s.title or 'the source'}' say?", _first_sentence(s.text), i
            )
            for i, s in enumerate(request.sources[: request.question_count])
        ]
        return RecallResult(questions=questions, model=MODEL)

    async def embed(self, request: EmbedInput, time_left: float | None) -> EmbedResult:
        """The fixed 8-dimension unit vector."""
        return EmbedResult(vector=list(EMBEDDING), model=MODEL)

    async def aclose(self) -> None:
        """Nothing to release."""
