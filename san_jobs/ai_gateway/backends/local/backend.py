"""The ``local`` backend: runs the offline algorithms on a small thread pool."""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from san_jobs.ai_gateway.backends.local.embed import embed
from san_jobs.ai_gateway.backends.local.recall import generate_recall
from san_jobs.ai_gateway.backends.local.summarize import summarize
from san_jobs.ai_gateway.backends.local.tags import extract_tags
from san_jobs.ai_gateway.backends.local.til import generate_til
from san_jobs.ai_gateway.kinds.analyze import AnalyzeInput, AnalyzeResult
from san_jobs.ai_gateway.kinds.embed import EmbedInput, EmbedResult
from san_jobs.ai_gateway.kinds.recall import RecallInput, RecallQuestion, RecallResult
from san_jobs.ai_gateway.kinds.til import TilInput, TilResult

MODEL = "local-textrank-v1"
T = TypeVar("T")


def analyze_sync(request: AnalyzeInput) -> AnalyzeResult:
    """Summary, tags and embedding of a text, computed in the calling thread."""
    context = f"{request.title}\n{request.text}" if request.title else request.text
    return AnalyzeResult(
        summary=summarize(request.text, request.title),
        tags=extract_tags(request.text, request.title),
        embedding=[float(x) for x in embed(context)],
        model=MODEL,
    )


def til_sync(request: TilInput) -> TilResult:
    """A TIL note, computed in the calling thread."""
    title, body = generate_til(request.day, request.notes)
    return TilResult(title=title, body=body, model=MODEL)


def recall_sync(request: RecallInput) -> RecallResult:
    """Recall questions, computed in the calling thread."""
    made = generate_recall(
        [(s.title, s.text) for s in request.sources],
        request.question_count,
        [s.key_terms for s in request.sources],
    )
    return RecallResult(
        questions=[RecallQuestion(q.question, q.answer, q.source_index) for q in made],
        model=MODEL,
    )


def embed_sync(request: EmbedInput) -> EmbedResult:
    """The text's hashed embedding (embed.DIMENSION numbers), in the calling thread."""
    return EmbedResult(vector=[float(x) for x in embed(request.text)], model=MODEL)


class LocalBackend:
    """Offline, deterministic algorithms; CPU work runs off the event loop.

    When the caller goes away the awaiting task is cancelled: a computation that has not
    started yet is dropped from the pool's queue, one already running finishes in its
    thread (Python threads cannot be interrupted) and its result is discarded. Each
    computation takes milliseconds, and the pool bounds how many can run at once.
    """

    name = "local"

    def __init__(self, workers: int | None = None) -> None:
        self._pool = ThreadPoolExecutor(
            max_workers=workers or min(4, os.cpu_count() or 1), thread_name_prefix="ai-local"
        )

    async def _run(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn)

    async def analyze(self, request: AnalyzeInput, time_left: float | None) -> AnalyzeResult:
        """See :class:`san_jobs.ai_gateway.backends.base.Backend`."""
        return await self._run(functools.partial(analyze_sync, request))

    async def generate_til(self, request: TilInput, time_left: float | None) -> TilResult:
        """See :class:`san_jobs.ai_gateway.backends.base.Backend`."""
        return await self._run(functools.partial(til_sync, request))

    async def generate_recall(self, request: RecallInput, time_left: float | None) -> RecallResult:
        """See :class:`san_jobs.ai_gateway.backends.base.Backend`."""
        return await self._run(functools.partial(recall_sync, request))

    async def embed(self, request: EmbedInput, time_left: float | None) -> EmbedResult:
        """See :class:`san_jobs.ai_gateway.backends.base.Backend`."""
        return await self._run(functools.partial(embed_sync, request))

    async def aclose(self) -> None:
        """Stop the pool; queued work is cancelled, running work is not waited for."""
        self._pool.shutdown(wait=False, cancel_futures=True)
