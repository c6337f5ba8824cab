"""The plain inputs and results of the first four kinds, under the names code and
tests import them by. Each is declared with its kind (san_jobs/ai_gateway/kinds/); a
new kind's types are imported from its own module, not added here."""

from __future__ import annotations

from san_jobs.ai_gateway.kinds.analyze import AnalyzeInput, AnalyzeResult
from san_jobs.ai_gateway.kinds.embed import EmbedInput, EmbedResult
from san_jobs.ai_gateway.kinds.recall import RecallInput, RecallQuestion, RecallResult, RecallSource
from san_jobs.ai_gateway.kinds.til import TilInput, TilResult

__all__ = [
    "AnalyzeInput",
    "AnalyzeResult",
    "EmbedInput",
    "EmbedResult",
    "RecallInput",
    "RecallQuestion",
    "RecallResult",
    "RecallSource",
    "TilInput",
    "TilResult",
]
