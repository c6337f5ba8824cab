"""The port every backend implements."""

from __future__ import annotations

from typing import Protocol


class Backend(Protocol):
    """A model backend. Inputs are already validated and within the token limit.

    A backend answers each kind of call (san_jobs/ai_gateway/kinds/) with its coroutine
    method named by the kind's ``handler``, e.g. ``async def analyze(self, request:
    AnalyzeInput, time_left: float | None) -> AnalyzeResult`` (see
    san_jobs/ai_gateway/kind.py): a new kind adds a method to each backend, not to this
    protocol. ``time_left`` is the caller's remaining time in seconds (None: no
    deadline). A backend raises only :mod:`san_jobs.ai_gateway.errors` exceptions for
    expected failures; it may be cancelled at any await point when the caller goes away.
    """

    name: str

    async def aclose(self) -> None:
        """Release connections and threads."""
        ...
