"""Validation of the request messages: protobuf in, plain validated inputs out.

It lives at the transport's edge because it is about the wire format (which field is
blank) and names fields as the proto spells them, for the ``BadRequest`` details.
"""

from __future__ import annotations

from san_jobs.ai_gateway.errors import FieldViolation, InvalidRequest, echo
from san_jobs.ai_gateway.models import AnalyzeInput, EmbedInput, RecallInput, RecallSource, TilInput
from san_jobs.proto.aigateway.v1 import ai_gateway_pb2 as pb
from san_jobs.shared.input_rules import DEFAULT_QUESTION_COUNT, MAX_QUESTION_COUNT, day_problem

_BLANK = "must not be empty or whitespace"


def analyze_input(request: pb.AnalyzeContentRequest) -> AnalyzeInput:
    """The validated input of AnalyzeContent."""
    if not request.text.strip():
        raise InvalidRequest([FieldViolation("text", _BLANK)])
    return AnalyzeInput(text=request.text, url=request.url, title=request.title)


def til_input(request: pb.GenerateTilRequest) -> TilInput:
    """The validated input of GenerateTil."""
    bad: list[FieldViolation] = []
    if day_problem(request.day) is not None:
        bad.append(FieldViolation("day", f"must be a date as YYYY-MM-DD, got {echo(request.day)}"))
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
    if not 0 <= request.question_count <= MAX_QUESTION_COUNT:
        bad.append(
            FieldViolation(
                "question_count",
                f"must be from 0 (meaning {DEFAULT_QUESTION_COUNT}) to {MAX_QUESTION_COUNT}, "
                f"got {request.question_count}",
            )
        )
    if bad:
        raise InvalidRequest(bad)
    return RecallInput(
        sources=[RecallSource(s.title, s.text) for s in request.sources],
        question_count=request.question_count or DEFAULT_QUESTION_COUNT,
    )


def embed_input(request: pb.EmbedRequest) -> EmbedInput:
    """The validated input of Embed."""
    if not request.text.strip():
        raise InvalidRequest([FieldViolation("text", _BLANK)])
    return EmbedInput(text=request.text)
