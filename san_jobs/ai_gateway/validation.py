"""The request checks of the first four kinds, under the names tests import them by
(tests/unit/shared/test_input_rules.py holds them to JobService's). Each is declared
with its kind (san_jobs/ai_gateway/kinds/), from san_jobs.shared.input_rules; a new
kind's check is its `Kind.validate`, not added here."""

from __future__ import annotations

from san_jobs.ai_gateway.kinds.analyze import analyze_input
from san_jobs.ai_gateway.kinds.embed import embed_input
from san_jobs.ai_gateway.kinds.recall import recall_input
from san_jobs.ai_gateway.kinds.til import til_input

__all__ = ["analyze_input", "embed_input", "recall_input", "til_input"]
