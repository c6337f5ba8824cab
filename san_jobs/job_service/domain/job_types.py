"""The job types, declared once: every layer reads its type lists from here.

An entry says all JobService knows of a type: the word stored in
`async_jobs.job_type` (its JobType member), the oneof cases its input and result take
in the API (EnqueueRequest.input / Job.input, Job.result), the AiGateway method that
does its work, the default gateway deadline, and its input rules (the check_*
functions below, which Enqueue runs before a job is stored).

What is not written here is derived, by conventions that tests/unit/job_service/
test_job_type_registry.py checks against the generated descriptors:
- the API enum value is `JOB_TYPE_<NAME>`, and the input and result cases are
  `<name>_input` and `<name>_result` (the clients rely on these too);
- the StreamCalls case is the gateway method in snake_case (`AnalyzeContent` ->
  `analyze_content`);
- the gateway's request and response carry the input's and the result's fields under
  the same names, so a job's stored input is its gateway request and the gateway's
  answer is its stored result, with no per-type code.

Adding a type: docs/adding_a_job_type.md.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from san_jobs.job_service.domain.errors import FieldViolation
from san_jobs.job_service.domain.field_rules import (
    EnqueueLimits,
    check_count,
    check_free_text,
    check_identifier,
)
from san_jobs.job_service.domain.limits import (
    MAX_RECALL_SOURCES,
    MAX_TIL_NOTES,
    MAX_TITLE_CHARS,
    MAX_URL_CHARS,
)
from san_jobs.shared.input_rules import (
    DEFAULT_QUESTION_COUNT,
    MAX_KEY_TERM_CHARS,
    MAX_KEY_TERMS,
    MAX_QUESTION_COUNT,
    day_problem,
)


class JobType(enum.StrEnum):
    """Kinds of work; the values are the plain words stored in `async_jobs.job_type`.
    Each member has exactly one entry in JOB_TYPES below (checked at import)."""

    CARD_ANALYSIS = "CARD_ANALYSIS"
    TIL_GENERATION = "TIL_GENERATION"
    RECALL_GENERATION = "RECALL_GENERATION"
    EMBEDDING = "EMBEDDING"


_CAMEL_HUMP = re.compile(r"(?<!^)(?=[A-Z])")


@dataclass(frozen=True, slots=True)
class JobTypeSpec:
    """One job type, as every layer of JobService sees it."""

    job_type: JobType
    # The case of the `input` oneof (EnqueueRequest and Job) that carries the input.
    input_field: str
    # The case of Job's `result` oneof that carries the result.
    result_field: str
    # The AiGatewayService RPC that does the work (also the call's StreamCalls case).
    gateway_method: str
    # Seconds the gateway call may take, unless the operator says otherwise
    # (--deadline, --deadline-for).
    default_deadline: float
    # Enqueue's rules for the input (the check_* functions below).
    check_input: InputCheck

    @property
    def name(self) -> str:
        """The stored word, e.g. CARD_ANALYSIS."""
        return self.job_type.value

    @property
    def proto_name(self) -> str:
        """The JobType enum value's name in the API, e.g. JOB_TYPE_CARD_ANALYSIS."""
        return f"JOB_TYPE_{self.name}"

    @property
    def gateway_field(self) -> str:
        """The case of StreamedCall.request and StreamedCallResult.outcome for the
        gateway method, e.g. analyze_content."""
        return _CAMEL_HUMP.sub("_", self.gateway_method).lower()


# -- Each type's input rules: what Enqueue checks before a job is stored. -------------
# A check is given the input's oneof field (`card_analysis_input`, ...) to name the bad
# fields by their API path, the input as a JSON object (proto field names), the
# operator's limits, and the list to append violations to; it reports every one.

InputCheck = Callable[[str, Mapping[str, Any], EnqueueLimits, list[FieldViolation]], None]

# Not an input field: given to a check (in a copy of the input) when the request has
# depends_on, whose results can stand in for a TIL's notes or a recall's sources.
FROM_DEPENDENCIES = "\x00depends_on"


def check_card_analysis(
    field: str, params: Mapping[str, Any], limits: EnqueueLimits, out: list[FieldViolation]
) -> None:
    text = str(params.get("text", ""))
    check_free_text(f"{field}.text", text, limits.max_text_chars, out, required=True)
    check_identifier(f"{field}.url", str(params.get("url", "")), MAX_URL_CHARS, out)
    check_free_text(f"{field}.title", str(params.get("title", "")), MAX_TITLE_CHARS, out)


def check_til_generation(
    field: str, params: Mapping[str, Any], limits: EnqueueLimits, out: list[FieldViolation]
) -> None:
    day = str(params.get("day", ""))
    problem = day_problem(day)
    if problem == "format":
        out.append(FieldViolation(f"{field}.day", "must be a date as YYYY-MM-DD"))
    elif problem == "date":
        out.append(FieldViolation(f"{field}.day", f"{day} is not a real date"))
    notes = [str(n) for n in params.get("notes", [])]
    if not check_count(f"{field}.notes", len(notes), MAX_TIL_NOTES, out):
        return
    for index, note in enumerate(notes):
        check_free_text(f"{field}.notes[{index}]", note, limits.max_text_chars, out)
    if not any(n.strip() for n in notes) and not params.get(FROM_DEPENDENCIES):
        out.append(
            FieldViolation(
                f"{field}.notes",
                "at least one non-blank note is required (or a CARD_ANALYSIS job in depends_on)",
            )
        )
    total = sum(len(n) for n in notes)
    if total > limits.max_text_chars:
        out.append(
            FieldViolation(
                f"{field}.notes",
                f"hold {total} characters in all; at most {limits.max_text_chars} allowed",
            )
        )


def check_recall_generation(
    field: str, params: Mapping[str, Any], limits: EnqueueLimits, out: list[FieldViolation]
) -> None:
    sources = params.get("sources", [])
    if not sources and not params.get(FROM_DEPENDENCIES):
        out.append(
            FieldViolation(
                f"{field}.sources", "at least one source is required (or a job in depends_on)"
            )
        )
    if not check_count(f"{field}.sources", len(sources), MAX_RECALL_SOURCES, out):
        return
    total = 0
    for index, source in enumerate(sources):
        path = f"{field}.sources[{index}]"
        text = str(source.get("text", ""))
        total += len(text)
        check_free_text(f"{path}.text", text, limits.max_text_chars, out, required=True)
        check_free_text(f"{path}.title", str(source.get("title", "")), MAX_TITLE_CHARS, out)
        if source.get("job_id"):
            out.append(
                FieldViolation(
                    f"{path}.job_id", "is set by JobService from depends_on; leave it empty"
                )
            )
        terms = list(source.get("key_terms", []))
        if check_count(f"{path}.key_terms", len(terms), MAX_KEY_TERMS, out):
            for number, term in enumerate(terms):
                check_free_text(
                    f"{path}.key_terms[{number}]", str(term), MAX_KEY_TERM_CHARS, out, required=True
                )
    if total > limits.max_text_chars:
        out.append(
            FieldViolation(
                f"{field}.sources",
                f"hold {total} characters in all; at most {limits.max_text_chars} allowed",
            )
        )
    count = int(params.get("question_count", 0))
    if count < 0 or count > MAX_QUESTION_COUNT:
        out.append(
            FieldViolation(
                f"{field}.question_count",
                f"must be between 1 and {MAX_QUESTION_COUNT} "
                f"(0 means {DEFAULT_QUESTION_COUNT}); got {count}",
            )
        )


def check_embedding(
    field: str, params: Mapping[str, Any], limits: EnqueueLimits, out: list[FieldViolation]
) -> None:
    text = str(params.get("text", ""))
    check_free_text(f"{field}.text", text, limits.max_text_chars, out, required=True)


def _registry(entries: Iterable[JobTypeSpec]) -> Mapping[JobType, JobTypeSpec]:
    """The entries by type; every JobType member must have exactly one."""
    by_type: dict[JobType, JobTypeSpec] = {}
    for entry in entries:
        if entry.job_type in by_type:
            raise ValueError(f"job type {entry.name} is registered twice")
        by_type[entry.job_type] = entry
    missing = [t.value for t in JobType if t not in by_type]
    if missing:
        raise ValueError(f"job types without a registry entry: {', '.join(missing)}")
    return {t: by_type[t] for t in JobType}  # in the enum's order


JOB_TYPES: Mapping[JobType, JobTypeSpec] = _registry(
    [
        JobTypeSpec(
            JobType.CARD_ANALYSIS,
            input_field="card_analysis_input",
            result_field="card_analysis_result",
            gateway_method="AnalyzeContent",
            default_deadline=30.0,
            check_input=check_card_analysis,
        ),
        JobTypeSpec(
            JobType.TIL_GENERATION,
            input_field="til_generation_input",
            result_field="til_generation_result",
            gateway_method="GenerateTil",
            default_deadline=60.0,
            check_input=check_til_generation,
        ),
        JobTypeSpec(
            JobType.RECALL_GENERATION,
            input_field="recall_generation_input",
            result_field="recall_generation_result",
            gateway_method="GenerateRecall",
            default_deadline=60.0,
            check_input=check_recall_generation,
        ),
        JobTypeSpec(
            JobType.EMBEDDING,
            input_field="embedding_input",
            result_field="embedding_result",
            gateway_method="Embed",
            default_deadline=30.0,
            check_input=check_embedding,
        ),
    ]
)


def job_type_named(name: str) -> JobType | None:
    """The type stored as `name` (e.g. CARD_ANALYSIS), or None for an unknown word."""
    try:
        return JobType(name)
    except ValueError:
        return None


def default_deadlines() -> dict[JobType, float]:
    """Each type's default gateway deadline, in seconds."""
    return {t: spec.default_deadline for t, spec in JOB_TYPES.items()}
