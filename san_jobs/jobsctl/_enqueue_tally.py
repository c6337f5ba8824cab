"""What ``jobsctl enqueue-file`` learned about each line: counts, the problem lines
worth listing, the optional ``--results`` file, and the summary (plain text for
people, one JSON object for scripts).

Memory stays bounded whatever the file's length: only the counts and the first
``MAX_KEPT`` problem lines are kept; every line's outcome goes to ``--results``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TextIO

from san_jobs.client import DuplicateJobError, EnqueueOutcome, InvalidRequestError, JobsError
from san_jobs.jobsctl import _render

CREATED = "created"
DUPLICATE = "duplicate"  # an existing job returned: request_id repeat or --return-existing
INVALID = "invalid"  # not parsed here, or INVALID_ARGUMENT from JobService
REJECTED = "rejected"  # ALREADY_EXISTS: an active job exists for the type and target
FAILED = "failed"  # any other error of the item
UNCONFIRMED = "unconfirmed"  # sent, but its batch's answer was lost
STATUSES = (CREATED, DUPLICATE, INVALID, REJECTED, FAILED, UNCONFIRMED)
PROBLEMS = (INVALID, REJECTED, FAILED)

MAX_LISTED = 20
"""Problem lines of each kind listed in the plain summary."""
MAX_KEPT = 1_000
"""Problem lines kept for the --json summary; all of them are in --results."""


@dataclass(frozen=True, slots=True)
class LineOutcome:
    line: int
    status: str
    message: str = ""
    job_id: str = ""  # the job's id; for a rejected line, the existing job's

    def as_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"line": self.line, "status": self.status}
        if self.job_id:
            body["jobId"] = self.job_id
        if self.message:
            body["message"] = self.message
        return body


def from_outcome(line: int, outcome: EnqueueOutcome) -> LineOutcome:
    """One line's outcome from JobService's answer to it."""
    if outcome.error is None:
        assert outcome.job is not None
        return LineOutcome(line, DUPLICATE if outcome.deduplicated else CREATED, "", outcome.job.id)
    error = outcome.error
    if isinstance(error, DuplicateJobError):
        return LineOutcome(line, REJECTED, str(error), error.existing_job_id)
    if isinstance(error, InvalidRequestError):
        return LineOutcome(line, INVALID, _violations(error))
    return LineOutcome(line, FAILED, f"{error.code.name}: {error}")


def _violations(error: InvalidRequestError) -> str:
    if not error.field_violations:
        return str(error)
    return "; ".join(f"{v.field}: {v.description}" for v in error.field_violations)


@dataclass
class Tally:
    """Every line's outcome, counted as it comes (in line order)."""

    results: TextIO | None = None
    counts: Counter[str] = field(default_factory=Counter)
    kept: list[LineOutcome] = field(default_factory=list)
    first_line: int | None = None
    last_line: int | None = None
    unconfirmed_ranges: list[tuple[int, int]] = field(default_factory=list)

    def add(self, outcome: LineOutcome) -> None:
        self.counts[outcome.status] += 1
        if self.first_line is None:
            self.first_line = outcome.line
        self.last_line = outcome.line
        if outcome.status in PROBLEMS and len(self.kept) < MAX_KEPT:
            self.kept.append(outcome)
        if self.results is not None:
            _render.print_json(outcome.as_dict(), self.results)

    def unconfirmed_range(self, lines: list[int]) -> None:
        """Note the lines of a batch whose answer never came (each is added too)."""
        if lines:
            self.unconfirmed_ranges.append((lines[0], lines[-1]))

    @property
    def problem_count(self) -> int:
        return sum(self.counts[status] for status in PROBLEMS)


@dataclass(frozen=True, slots=True)
class Stop:
    """Why the file was not read to its end, and where to go on."""

    message: str
    resume_line: int
    error: JobsError | None = None


def summary_dict(tally: Tally, source: str, stop: Stop | None) -> dict[str, Any]:
    """The --json summary: counts, the first MAX_KEPT problem lines, and where to resume."""
    body: dict[str, Any] = {"file": source, "complete": stop is None}
    body |= {status: tally.counts[status] for status in STATUSES}
    body |= {"firstLine": tally.first_line, "lastLine": tally.last_line}
    body["problems"] = [outcome.as_dict() for outcome in tally.kept]
    body["problemsOmitted"] = tally.problem_count - len(tally.kept)
    body["unconfirmedLines"] = [list(r) for r in tally.unconfirmed_ranges]
    body["resumeFromLine"] = None if stop is None else stop.resume_line
    if stop is not None:
        body["stopped"] = stop.message
        if stop.error is not None:
            body |= _render.error_dict(stop.error)
    return body


def summary_lines(tally: Tally, source: str, stop: Stop | None, seconds: float) -> list[str]:
    """The plain summary: counts, up to MAX_LISTED lines of each problem, and what to
    do after a stop. Text from the file or the server goes through `plain`."""
    counts = tally.counts
    answered = counts.total() - counts[UNCONFIRMED]
    span = "no lines" if tally.first_line is None else f"lines {tally.first_line}-{tally.last_line}"
    rate = f", {answered / seconds:,.0f} lines/s" if seconds > 0 and answered else ""
    lines = [
        f"{_render.plain(source)}: {span} in {seconds:.1f}s{rate}",
        f"created {counts[CREATED]:,}, duplicate {counts[DUPLICATE]:,}, "
        f"invalid {counts[INVALID]:,}, rejected as duplicate {counts[REJECTED]:,}"
        + (f", failed {counts[FAILED]:,}" if counts[FAILED] else ""),
    ]
    titles = {
        INVALID: "invalid lines:",
        REJECTED: "rejected as duplicate (an active job exists for its type and target):",
        FAILED: "failed lines:",
    }
    for status in PROBLEMS:
        if not counts[status]:
            continue
        lines.append(titles[status])
        listed = [o for o in tally.kept if o.status == status][:MAX_LISTED]
        for outcome in listed:
            text = f"existing job {outcome.job_id}" if status == REJECTED else outcome.message
            lines.append(f"  line {outcome.line}: {_render.plain(text)}")
        if counts[status] > len(listed):
            lines.append(f"  ... and {counts[status] - len(listed):,} more")
    if stop is not None:
        lines.extend(_stop_lines(tally, source, stop))
    return lines


def _stop_lines(tally: Tally, source: str, stop: Stop) -> list[str]:
    lines = [f"stopped: {_render.plain(stop.message)}"]
    if tally.unconfirmed_ranges:
        ranges = ", ".join(f"{a}-{b}" for a, b in tally.unconfirmed_ranges)
        lines.append(
            f"unconfirmed (sent, no answer): lines {ranges}; they may be stored: resending "
            "them is safe only for lines with a requestId"
        )
    lines.append(
        f"resume with: jobsctl enqueue-file {_render.plain(source)} --start-line {stop.resume_line}"
    )
    return lines
