"""What one gateway call consumed, reported with its answer (issue 13, point 9)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Usage:
    """The model that answered and what the call cost. `cached`: answered from the
    result cache (or by joining an identical call in flight): no tokens spent."""

    model: str
    input_tokens: int
    output_tokens: int
    duration_seconds: float
    cached: bool = False
