"""Jobs that run after other jobs (EnqueueRequest.depends_on): the rules, in one place.

A dependent job is stored PENDING with `dependencies_left` = its dependencies not yet
COMPLETED. While that is above 0 it waits: its next_attempt_at is WAITING (a time no
clock reaches), so due_at (= COALESCE(next_attempt_at, updated_at), the CHECK
ck_async_jobs_due_at) keeps it out of every claim with no rule of its own, and old
instances honour it too. A trigger on async_jobs (migration 0017) does the rest in the
statement that ends a dependency, whichever instance and version writes it:

- COMPLETED: each waiting dependent's count goes down by one; the one that reaches 0
  gets next_attempt_at = its schedule time if still ahead, else NULL: due at once.
- FAILED or CANCELLED: each waiting dependent is CANCELLED with `failure_message`,
  which ends its own dependents likewise (the trigger fires again for it).

The trigger fires only for rows with `has_dependents`, set by the Enqueue of a
dependent (in the transaction that reads the dependencies' statuses, which also locks
their rows): a job nobody depends on pays one boolean test per status change.

Results flow at the dependent's first claim (`merged_input`): what each type takes from
which dependency is `ACCEPTED` below; the merged input is stored as the job's input, so
a retry sends the same one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from san_jobs.job_service.domain.limits import (
    DEFAULT_MAX_TEXT_CHARS,
    MAX_RECALL_SOURCES,
    MAX_TIL_NOTES,
)
from san_jobs.job_service.domain.model import JobStatus, JobType, JsonDict
from san_jobs.shared.input_rules import usable_key_terms

# At most this many dependencies per job (EnqueueRequest.depends_on).
MAX_DEPENDENCIES = 100
# How deep a chain may go: a job's depth is 0 without dependencies, else one more than
# its deepest dependency's; an Enqueue past this is refused naming depends_on[i]. The
# end of a dependency ends its dependents in the same statement, level by level
# (migration 0017's trigger fires again for each): SQLite stops at 1,000 levels of
# trigger recursion and PostgreSQL's stack between 600 and 800, and each level holds
# the write lock and memory, so a chain is bounded well below both.
MAX_DEPENDENCY_DEPTH = 32
DEPENDS_ON_FIELD = "depends_on"

# next_attempt_at of a job waiting for dependencies: never due by the clock. Far from
# datetime.max, so adding a lease or a delay to it can never overflow.
WAITING = datetime(9000, 1, 1, tzinfo=UTC)

# Which dependency types a job type accepts (None: any, order only, nothing flows).
ACCEPTED: Mapping[JobType, frozenset[JobType] | None] = {
    JobType.TIL_GENERATION: frozenset({JobType.CARD_ANALYSIS}),
    JobType.RECALL_GENERATION: frozenset({JobType.CARD_ANALYSIS, JobType.TIL_GENERATION}),
    JobType.CARD_ANALYSIS: None,
    JobType.EMBEDDING: None,
}

# The types whose input takes their dependencies' results.
TAKES_RESULTS = frozenset(t for t, accepted in ACCEPTED.items() if accepted is not None)


def failure_message(dependency_id: str, status: JobStatus | str) -> str:
    """The error_message (and cancel_reason) of a dependent a dependency ended."""
    word = status.value if isinstance(status, JobStatus) else status
    return f"Dependency {dependency_id} {word}"


def depth_problem(dependency_id: str, dependency_depth: int) -> str | None:
    """Why a job cannot depend on one `dependency_depth` deep, or None if it can."""
    if dependency_depth < MAX_DEPENDENCY_DEPTH:
        return None
    return (
        f"job {dependency_id} is already {dependency_depth} dependencies deep; a chain"
        f" of jobs is at most {MAX_DEPENDENCY_DEPTH} deep"
    )


def dependency_problem(job_type: JobType, dependency_type: JobType) -> str | None:
    """Why `job_type` cannot depend on a job of `dependency_type`, or None if it can."""
    accepted = ACCEPTED[job_type]
    if accepted is None or dependency_type in accepted:
        return None
    names = " or ".join(sorted(t.value for t in accepted))
    return (
        f"a {job_type.value} job takes results of {names} jobs only;"
        f" this one is {dependency_type.value}"
    )


@dataclass(frozen=True, slots=True)
class Finished:
    """A COMPLETED dependency, as the merge reads it."""

    job_id: str
    job_type: JobType
    completed_at: datetime
    result: JsonDict
    # Its own input: a card's title is there (CardAnalysisResult has none).
    input: JsonDict


def merged_input(
    job_type: JobType,
    params: JsonDict,
    dependencies: Sequence[Finished],
    max_chars: int = DEFAULT_MAX_TEXT_CHARS,
) -> JsonDict:
    """`params` (the job's input as enqueued) with its dependencies' results added, in
    the order they completed (ties by id): a TIL's notes take the cards' summaries; a
    recall's sources take a card's title (from its input) and summary, a TIL's title
    and body, each with job_id. Other types take nothing.

    Bounded as an Enqueue's own input is: at most `max_chars` characters of notes (of
    sources' text) in all, MAX_TIL_NOTES notes, MAX_RECALL_SOURCES sources. What does
    not fit is left out, in completion order (the one that meets the bound is cut to
    what is left, if that is worth sending): forty TILs of 120 KB each made a recall's
    stored input 4.75 MB, which no page of ListJobs could carry."""
    ordered = sorted(dependencies, key=lambda d: (d.completed_at, d.job_id))
    merged: dict[str, Any] = dict(params)
    if job_type is JobType.TIL_GENERATION:
        notes = list(params.get("notes", []))
        room = _Room(max_chars - sum(len(n) for n in notes), MAX_TIL_NOTES - len(notes))
        for dependency in ordered:
            note = room.take(_text(dependency.result.get("summary")))
            if note is not None:
                notes.append(note)
        merged["notes"] = [n for n in notes if n.strip()] or notes
    elif job_type is JobType.RECALL_GENERATION:
        sources = list(params.get("sources", []))
        used = sum(len(str(s.get("text", ""))) for s in sources)
        room = _Room(max_chars - used, MAX_RECALL_SOURCES - len(sources))
        for dependency in ordered:
            source = _source(dependency)
            if source is None:
                continue
            text = room.take(source["text"])
            if text is not None:
                sources.append(source | {"text": text})
        merged["sources"] = sources
    return merged


# A dependency's text cut to fewer characters than this is left out instead.
MIN_USEFUL_CHARS = 200


@dataclass(slots=True)
class _Room:
    """What is left of the merged input's bounds: characters and items."""

    chars: int
    items: int

    def take(self, text: str) -> str | None:
        """`text`, or as much of it as fits; None once nothing useful fits."""
        if not text.strip():
            return None
        if self.items <= 0 or self.chars <= 0:
            return None
        if len(text) > self.chars:
            if self.chars < MIN_USEFUL_CHARS:
                self.chars = 0
                return None
            text = text[: self.chars]
        self.chars -= len(text)
        self.items -= 1
        return text


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _source(dependency: Finished) -> JsonDict | None:
    result = dependency.result
    terms: list[str] = []
    if dependency.job_type is JobType.CARD_ANALYSIS:
        text, title = _text(result.get("summary")), _text(dependency.input.get("title"))
        # The card's tags are its key terms: what a question blanks first.
        terms = usable_key_terms(result.get("tags"))
    else:
        text, title = _text(result.get("body")), _text(result.get("title"))
    if not text.strip():
        return None  # a result with nothing to ask about (the gateway refuses blank text)
    source: JsonDict = {"title": title, "text": text, "job_id": dependency.job_id}
    if terms:
        source["key_terms"] = terms
    return source
