"""The transition declarations (domain/transitions.py), applied to a job held as a dict.

This is the in-memory store's only way to change a job: it never says itself what
a transition writes. `applies` reads a declaration's sources, requirements and `when`;
`apply` evaluates its columns (`Transition.columns()`, so the derived `status`,
cleared claim and `due_at` too) against the row as it was, then edits the attempt
record. A declaration that changes changes what the memory store does; one that uses
an expression, requirement or attempt edit this module does not know raises TypeError
instead of being half-applied.

Values follow SQL where the difference shows: NULL (None) spreads through `Plus` and
comparisons, and a condition that is NULL counts as false.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from typing import Any, assert_never

from san_jobs.job_service.domain.model import (
    AttemptUsage,
    Job,
    JobAttempt,
    JobStatus,
    can_transition,
)
from san_jobs.job_service.domain.transitions import (
    NO_ROW,
    TYPE_LIST_SEPARATOR,
    Arg,
    AtMost,
    AttemptEdit,
    BySource,
    CloseAttempt,
    Coalesce,
    Col,
    DropAttempt,
    Expr,
    IsNull,
    LeaseUntil,
    Lit,
    New,
    NewToken,
    NotNull,
    Now,
    OpenAttempt,
    Plus,
    Requires,
    Source,
    Transition,
    When,
    check_declarations,
)

# A job as its table row: the Job's fields plus `due_at` (storage's own column).
Row = dict[str, Any]
JOB_FIELDS = tuple(f.name for f in fields(Job))
COLUMNS = (*JOB_FIELDS, "due_at")

# A declaration that disagrees with ALLOWED_TRANSITIONS never runs here.
check_declarations()


@dataclass(frozen=True, slots=True)
class Call:
    """What one call brings to a transition: the values named by its `args`, the time
    of the call (`Now()`) and the lease asked for (`LeaseUntil()`)."""

    args: Mapping[str, Any]
    now: datetime
    lease_seconds: float = 0.0


def blank_row() -> Row:
    """The row before an insert: every column NULL, no attempts."""
    return dict.fromkeys(COLUMNS) | {"attempts": ()}


def status_of(row: Row) -> JobStatus:
    return JobStatus(row["status"])


def applies(transition: Transition, row: Row | None, call: Call) -> bool:
    """Whether `transition` moves `row` (None: no row yet) for this call: the row
    leaves from one of its sources, every requirement of that source holds, and
    so does its `when`."""
    source = _source(transition, row)
    if source is None:
        return False
    current = blank_row() if row is None else row
    if not all(_holds(requirement, current, call) for requirement in source.requires):
        return False
    if transition.when is None:
        return True
    return _Evaluation(transition, row, call).value(transition.when) is True


def apply(transition: Transition, row: Row | None, call: Call) -> Row:
    """The row after `transition` (which must apply: see `applies`). Every column
    is computed from the row as it was, as one SQL UPDATE's SET would."""
    source = _source(transition, row)
    if source is None:
        raise ValueError(f"{transition.name} does not leave from this row's status")
    missing = set(transition.args) - set(call.args)
    if missing:
        raise TypeError(f"{transition.name} needs the arguments {sorted(missing)}")
    if row is not None and not can_transition(status_of(row), transition.target):
        # Unreachable while check_declarations() holds; kept so that the memory store
        # enforces ALLOWED_TRANSITIONS on every write, whatever the declarations say.
        raise AssertionError(f"{transition.name}: {row['status']} -> {transition.target}")
    evaluation = _Evaluation(transition, row, call)
    new = dict(evaluation.old)
    for name in evaluation.columns:
        if name not in new:
            raise TypeError(f"{transition.name} writes an unknown column {name!r}")
        new[name] = evaluation.column(name)
    new["attempts"] = _edit_attempts(evaluation, source.attempts)
    return new


def _source(transition: Transition, row: Row | None) -> Source | None:
    return transition.sources.get(NO_ROW if row is None else status_of(row))


def _holds(requirement: Requires, row: Row, call: Call) -> bool:
    match requirement:
        case Requires.BY_ID:
            return bool(row["id"] == call.args["job_id"])
        case Requires.CLAIM_TOKEN:
            token = row["claim_token"]
            return token is not None and token == call.args["token"]
        case Requires.DUE:
            return row["due_at"] is not None and row["due_at"] <= call.now
        case Requires.ATTEMPTS_LEFT:
            return bool(row["attempt_count"] < row["max_attempts"])
        case Requires.ATTEMPTS_USED:
            return bool(row["attempt_count"] >= row["max_attempts"])
        case Requires.OWNER_IF_GIVEN:
            owner = call.args.get("owner")
            return owner is None or row["requested_by"] == owner
        case Requires.TYPE_WANTED:
            word = f"{TYPE_LIST_SEPARATOR}{row['job_type']}{TYPE_LIST_SEPARATOR}"
            only = call.args["only_type"]
            return word not in call.args["skip_types"] and only in ("", row["job_type"])
    assert_never(requirement)


class _Evaluation:
    """One transition's expressions for one row; each column's new value is computed
    once (a NewToken read twice is the same token)."""

    def __init__(self, transition: Transition, row: Row | None, call: Call) -> None:
        self.old = blank_row() if row is None else row
        self.source = None if row is None else status_of(row)
        self.columns = transition.columns()
        self._call = call
        self._new: dict[str, Any] = {}

    def column(self, name: str) -> Any:
        """The value the write gives column `name` (the old one if it is not written)."""
        if name not in self.columns:
            return self.old[name]
        if name not in self._new:
            self._new[name] = self.value(self.columns[name])
        return self._new[name]

    def value(self, expr: Expr) -> Any:
        """The value of `expr`: the values a row and a call give, then what is made of
        other expressions (`_combined`)."""
        call = self._call
        match expr:
            case Lit(value):
                return value
            case Col(name):
                return self.old[name]
            case New(name):
                return self.column(name)
            case Arg(name):
                return call.args[name]
            case Now():
                return call.now
            case LeaseUntil():
                return call.now + timedelta(seconds=call.lease_seconds)
            case NewToken():
                return uuid.uuid4().hex
        return self._combined(expr)

    def _combined(self, expr: Expr) -> Any:
        match expr:
            case Plus(left, right):
                a, b = self.value(left), self.value(right)
                return None if a is None or b is None else a + b
            case Coalesce(values):
                return next((v for v in map(self.value, values) if v is not None), None)
            case AtMost(value, limit):
                current = self.value(value)
                return None if current is None else current <= limit
            case IsNull(value):
                return self.value(value) is None
            case NotNull(value):
                return self.value(value) is not None
            case When(condition, then, otherwise):
                return self.value(then if self.value(condition) is True else otherwise)
            case BySource(cases, otherwise):
                chosen = cases.get(self.source, otherwise) if self.source else otherwise
                return self.value(chosen)
        raise TypeError(f"no evaluation for the expression {expr!r}")


def _edit_attempts(
    evaluation: _Evaluation, edits: tuple[AttemptEdit, ...]
) -> tuple[JobAttempt, ...]:
    attempts: tuple[JobAttempt, ...] = tuple(evaluation.old["attempts"])
    now = evaluation.value(Now())
    for edit in edits:
        match edit:
            case OpenAttempt():
                number = evaluation.old["attempt_count"] + 1
                attempts = (*attempts, JobAttempt(attempt=number, start_time=now))
            case CloseAttempt(error, usage):
                if not attempts:
                    raise ValueError("no open attempt to close")
                closed = replace(attempts[-1], end_time=now)
                if error is not None:
                    code, reason, message = (evaluation.value(part) for part in error)
                    closed = replace(
                        closed, error_code=code, error_reason=reason, error_message=message
                    )
                if usage is not None:
                    # The argument is the attempt record's JSON object, as the SQL gets it.
                    closed = replace(closed, usage=AttemptUsage.from_json(evaluation.value(usage)))
                attempts = (*attempts[:-1], closed)
            case DropAttempt():
                attempts = attempts[:-1]
            case _:
                raise TypeError(f"no evaluation for the attempt edit {edit!r}")
    return attempts
