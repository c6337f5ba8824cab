"""gRPC transport: protobuf in and out, caller identity, rich errors, one record per call.

Validation of the request messages lives here too, because it is about the wire
format (which field is blank) and names fields as the proto spells them.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc
from san.aigateway.v1 import ai_gateway_pb2 as pb
from san.aigateway.v1 import ai_gateway_pb2_grpc as pb_grpc

from ai_gateway.calllog import CallLog, CallRecord
from ai_gateway.errors import FieldViolation, GatewayError, InvalidRequest, to_rpc_status
from ai_gateway.gateway import CallInfo, Gateway
from ai_gateway.models import AnalyzeInput, RecallInput, RecallSource, TilInput
from ai_gateway.tokens import estimate_tokens_all

logger = logging.getLogger(__name__)

T = TypeVar("T")
DEFAULT_QUESTIONS = 5
MAX_QUESTIONS = 20
_BLANK = "must not be empty or whitespace"
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
_MAX_CLIENT_ID = 128
# grpc.aio reports a huge remaining time when the caller set no deadline.
_NO_DEADLINE = 10**6


def analyze_input(request: pb.AnalyzeContentRequest) -> AnalyzeInput:
    """The validated input of AnalyzeContent."""
    if not request.text.strip():
        raise InvalidRequest([FieldViolation("text", _BLANK)])
    return AnalyzeInput(text=request.text, url=request.url, title=request.title)


def til_input(request: pb.GenerateTilRequest) -> TilInput:
    """The validated input of GenerateTil."""
    bad: list[FieldViolation] = []
    if not _is_day(request.day):
        bad.append(FieldViolation("day", f"must be a date as YYYY-MM-DD, got {request.day!r}"))
    if not request.notes:
        bad.append(FieldViolation("notes", "at least one note is required"))
    bad += [
        FieldViolation(f"notes[{i}]", _BLANK) for i, n in enumerate(request.notes) if not n.strip()
    ]
    if bad:
        raise InvalidRequest(bad)
    return TilInput(day=request.day, notes=list(request.notes))


def recall_input(request: pb.GenerateRecallRequest) -> RecallInput:
    """The validated input of GenerateRecall (question_count 0 becomes 5)."""
    bad: list[FieldViolation] = []
    if not request.sources:
        bad.append(FieldViolation("sources", "at least one source is required"))
    bad += [
        FieldViolation(f"sources[{i}].text", _BLANK)
        for i, s in enumerate(request.sources)
        if not s.text.strip()
    ]
    if not 0 <= request.question_count <= MAX_QUESTIONS:
        bad.append(
            FieldViolation(
                "question_count",
                f"must be from 0 (meaning {DEFAULT_QUESTIONS}) to {MAX_QUESTIONS}, "
                f"got {request.question_count}",
            )
        )
    if bad:
        raise InvalidRequest(bad)
    return RecallInput(
        sources=[RecallSource(s.title, s.text) for s in request.sources],
        question_count=request.question_count or DEFAULT_QUESTIONS,
    )


class AiGatewayServicer(pb_grpc.AiGatewayServiceServicer):
    """The AiGatewayService RPCs over a :class:`~ai_gateway.gateway.Gateway`."""

    def __init__(self, gateway: Gateway, call_log: CallLog) -> None:
        self._gateway = gateway
        self._call_log = call_log

    async def AnalyzeContent(
        self, request: pb.AnalyzeContentRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.AnalyzeContentResponse:
        """Summary, tags and embedding of a text."""

        async def handle(call: CallInfo, remaining: float | None) -> pb.AnalyzeContentResponse:
            data = analyze_input(request)
            tokens = estimate_tokens_all([data.title, data.text])
            backend = self._gateway.backend
            result = await self._gateway.run(
                call, tokens, remaining, lambda t: backend.analyze(data, t)
            )
            return pb.AnalyzeContentResponse(
                summary=result.summary,
                tags=result.tags,
                embedding=result.embedding,
                model=result.model,
            )

        return await self._serve("AnalyzeContent", context, handle)

    async def GenerateTil(
        self, request: pb.GenerateTilRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.GenerateTilResponse:
        """A TIL note from a day's notes."""

        async def handle(call: CallInfo, remaining: float | None) -> pb.GenerateTilResponse:
            data = til_input(request)
            tokens = estimate_tokens_all(data.notes)
            backend = self._gateway.backend
            result = await self._gateway.run(
                call, tokens, remaining, lambda t: backend.generate_til(data, t)
            )
            return pb.GenerateTilResponse(title=result.title, body=result.body, model=result.model)

        return await self._serve("GenerateTil", context, handle)

    async def GenerateRecall(
        self, request: pb.GenerateRecallRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.GenerateRecallResponse:
        """Question/answer pairs grounded in the sources."""

        async def handle(call: CallInfo, remaining: float | None) -> pb.GenerateRecallResponse:
            data = recall_input(request)
            tokens = estimate_tokens_all(t for s in data.sources for t in (s.title, s.text))
            backend = self._gateway.backend
            result = await self._gateway.run(
                call, tokens, remaining, lambda t: backend.generate_recall(data, t)
            )
            return pb.GenerateRecallResponse(
                questions=[
                    pb.Question(question=q.question, answer=q.answer, source_index=q.source_index)
                    for q in result.questions
                ],
                model=result.model,
            )

        return await self._serve("GenerateRecall", context, handle)

    async def _serve(
        self,
        method: str,
        context: grpc.aio.ServicerContext[object, object],
        handle: Callable[[CallInfo, float | None], Awaitable[T]],
    ) -> T:
        """Run ``handle``; turn gateway errors into rich statuses; record the call."""
        start = time.perf_counter()
        call = call_info(method, context)
        code = "UNKNOWN"
        try:
            remaining: float | None = context.time_remaining()
            if remaining is not None and remaining > _NO_DEADLINE:
                remaining = None
            response = await handle(call, remaining)
            code = "OK"
            return response
        except GatewayError as err:
            code = err.code.name
            # abort_with_status is missing from grpc-stubs' aio context.
            await context.abort_with_status(to_rpc_status(err))  # type: ignore[attr-defined]
            raise  # unreachable: abort_with_status raises
        except asyncio.CancelledError:
            # The caller went away (or cancelled): our work is abandoned with the task.
            code = "CANCELLED"
            raise
        except grpc.aio.AbortError:
            raise
        except Exception:
            logger.exception("%s failed unexpectedly", method)
            code = "INTERNAL"
            await context.abort(grpc.StatusCode.INTERNAL, "internal error in the AI gateway")
            raise
        finally:
            self._call_log.record(
                CallRecord(
                    method=method,
                    client_id=call.client_id,
                    job_id=call.job_id,
                    attempt=call.attempt,
                    code=code,
                    duration_ms=(time.perf_counter() - start) * 1000,
                )
            )


def call_info(method: str, context: grpc.aio.ServicerContext[object, object]) -> CallInfo:
    """Caller id (``x-client-id``, else the peer's address), job id and attempt."""
    metadata: dict[str, str] = {}
    for key, value in context.invocation_metadata() or ():
        if isinstance(value, str):
            metadata[key.lower()] = value
    client = metadata.get("x-client-id", "").strip()[:_MAX_CLIENT_ID] or _peer_host(context.peer())
    attempt_text = metadata.get("x-attempt", "")
    attempt = int(attempt_text) if attempt_text.isdigit() else None
    return CallInfo(method, client, metadata.get("x-job-id") or None, attempt)


def _peer_host(peer: str) -> str:
    """``ipv4:127.0.0.1:50000`` → ``ipv4:127.0.0.1``: a reconnecting client keeps its bucket."""
    if peer.startswith(("ipv4:", "ipv6:")):
        return peer.rsplit(":", 1)[0]
    return peer or "unknown"


def _is_day(day: str) -> bool:
    if not _DAY.fullmatch(day):
        return False
    try:
        datetime.date.fromisoformat(day)
    except ValueError:
        return False
    return True
