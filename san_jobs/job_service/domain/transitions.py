"""Every write that changes a job, declared once.

A `Transition` says which statuses a job leaves from (with what must hold for each:
the caller's claim token still owns it, it is due, it has attempts left), the status
it goes to, the columns it sets, how it edits the attempt record, and whether it
notifies the change. Two things read these declarations and nothing else decides what
a write does:

- `san_jobs.job_service.storage.transition_sql` compiles each one to a SQL statement for
  PostgreSQL and SQLite (the store's methods only bind arguments and run them);
- `san_jobs.job_service.storage.memory` applies them to jobs held in a dict (the in-memory
  store that the worker's unit tests run against).

Two columns are never set by hand: `status` is the transition's target, and `due_at`
(when the worker next looks at the job) is derived from the row's new values by
`due_at()`; the CHECK constraint `ck_async_jobs_due_at` (`DUE_AT_CHECK_SQL`) holds it in
the database. A transition whose target is not PROCESSING clears the claim token and
the lease (`ck_async_jobs_claimed`: only a PROCESSING job has a claim token).

Expressions read the row as it was before the write (as SQL's SET does); `New(c)` reads
the value the write gives column `c` (only `due_at()` uses it). `Now()` is the time of
the call: in a batched statement, each row's own call time.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from san_jobs.job_service.domain.model import ALLOWED_TRANSITIONS, JobStatus
from san_jobs.job_service.domain.model import ATTEMPT_FIELDS as _ATTEMPT_FIELDS

LEASE_EXPIRED_CODE = "LEASE_EXPIRED"
LEASE_EXPIRED_MESSAGE = "Lease expired: the worker was lost"
CANCELLED_CODE = "CANCELLED"


def cancel_message(reason: str) -> str:
    """The error_message of the attempt a CancelJob ends."""
    return f"Cancelled: {reason}" if reason else "Cancelled"


# Why a write refused or skipped a job, as callers read it (every store says the same).
NOT_CANCELLABLE = "only PENDING or PROCESSING jobs can be cancelled"
RETRIED_BY_ANOTHER_CALL = "no longer FAILED: another call retried it"


def active_holder_reason(holder_id: str) -> str:
    """Why RetryFailed skipped a job: another job holds its (job_type, target_id)."""
    return f"an active job exists for this job type and target: {holder_id}"


# -- expressions ---------------------------------------------------------------------


class Expr:
    """A value a transition writes; see the module docstring for when each is read."""


@dataclass(frozen=True, slots=True)
class Lit(Expr):
    """A constant: a string, an int, or None (NULL)."""

    value: str | int | None


@dataclass(frozen=True, slots=True)
class Col(Expr):
    """The column's value before the write."""

    name: str


@dataclass(frozen=True, slots=True)
class New(Expr):
    """The value the write gives the column (itself, where the write leaves it)."""

    name: str


@dataclass(frozen=True, slots=True)
class Arg(Expr):
    """A value the caller gives (per row in a batch): see each transition's `args`."""

    name: str


@dataclass(frozen=True, slots=True)
class Now(Expr):
    """The time of the call."""


@dataclass(frozen=True, slots=True)
class LeaseUntil(Expr):
    """Now plus the lease the caller asks for (`lease_seconds`)."""


@dataclass(frozen=True, slots=True)
class NewToken(Expr):
    """A fresh random claim token."""


@dataclass(frozen=True, slots=True)
class Plus(Expr):
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class Coalesce(Expr):
    """The first of `values` that is not NULL."""

    values: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class AtMost(Expr):
    """A condition: `value <= limit`."""

    value: Expr
    limit: int


@dataclass(frozen=True, slots=True)
class IsNull(Expr):
    """A condition: `value IS NULL`."""

    value: Expr


@dataclass(frozen=True, slots=True)
class NotNull(Expr):
    """A condition: `value IS NOT NULL`."""

    value: Expr


@dataclass(frozen=True, slots=True)
class When(Expr):
    """`then` where `condition` holds, else `otherwise`."""

    condition: Expr
    then: Expr
    otherwise: Expr


@dataclass(frozen=True, slots=True)
class BySource(Expr):
    """A value that depends on the status the job leaves from; `otherwise` for the rest."""

    cases: Mapping[JobStatus, Expr]
    otherwise: Expr


# -- the attempt record ----------------------------------------------------------------

# The JSON shape of one element of `async_jobs.attempts` (JobAttempt's fields, in
# order): ("attempt", "start_time", "end_time", "error_code", "error_reason",
# "error_message", "usage"). The SQL builds its objects with these keys.
ATTEMPT_FIELDS = _ATTEMPT_FIELDS
# The attempt fields that hold an error, the columns of the same names mirror them.
ATTEMPT_ERROR_FIELDS = ("error_code", "error_reason", "error_message")
# The attempt field that holds a JSON object (AttemptUsage.to_json()) or null.
ATTEMPT_USAGE_FIELD = "usage"


@dataclass(frozen=True, slots=True)
class OpenAttempt:
    """Append a new attempt: number attempt_count + 1 (the old count), started now,
    not ended, no error."""


@dataclass(frozen=True, slots=True)
class CloseAttempt:
    """End the last (open) attempt now; with `error`, record (code, reason, message);
    with `usage`, record what the gateway call consumed (a JSON object, or null)."""

    error: tuple[Expr, Expr, Expr] | None = None
    usage: Expr | None = None


@dataclass(frozen=True, slots=True)
class DropAttempt:
    """Remove the last attempt (a claim given back uncharged)."""


AttemptEdit = OpenAttempt | CloseAttempt | DropAttempt


# -- what must hold for a job to move ----------------------------------------------------


class Requires(enum.Enum):
    """Conditions on the row, beyond its status, for it to move."""

    BY_ID = "the job named by Arg('job_id')"
    CLAIM_TOKEN = "claim_token = Arg('token'): the caller's claim still owns the job"
    DUE = "due_at <= Now()"
    ATTEMPTS_LEFT = "attempt_count < max_attempts"
    ATTEMPTS_USED = "attempt_count >= max_attempts"
    OWNER_IF_GIVEN = "requested_by = Arg('owner'), when the caller names an owner"
    # Dispatch pauses (domain/dispatch.py): a paused type is not claimed, and a probe
    # claims one job of its type alone. Both arguments are text (see claim_type_args).
    TYPE_WANTED = "job_type not among Arg('skip_types'), and = Arg('only_type') unless that is ''"


@dataclass(frozen=True, slots=True)
class Source:
    """One status a transition leaves from, with what must hold and how the attempt
    record changes when the job leaves from it."""

    requires: frozenset[Requires] = frozenset()
    attempts: tuple[AttemptEdit, ...] = ()


# A job that does not exist yet (Enqueue inserts it).
NO_ROW = None


@dataclass(frozen=True, slots=True)
class Transition:
    name: str
    sources: Mapping[JobStatus | None, Source]
    target: JobStatus
    sets: Mapping[str, Expr]
    # Values the caller gives, by name (Arg), besides Now() and the lease.
    args: tuple[str, ...] = ()
    notifies: bool = True
    # Between transitions that share one batched statement (fail-and-retry and
    # fail-final), the one whose condition holds for the row's arguments applies.
    when: Expr | None = None

    @property
    def pairs(self) -> frozenset[tuple[JobStatus, JobStatus]]:
        """(from, to) status pairs this transition makes (not counting the insert)."""
        return frozenset((s, self.target) for s in self.sources if s is not None)

    def columns(self) -> dict[str, Expr]:
        """Every column the transition writes, derived ones included."""
        written: dict[str, Expr] = {"status": Lit(self.target.value)}
        if self.target is not JobStatus.PROCESSING:
            written |= {"claim_token": Lit(None), "lease_expires_at": Lit(None)}
        written |= dict(self.sets)
        written["due_at"] = due_at(self.target)
        return written


def due_at(status: JobStatus) -> Expr:
    """When the worker next looks at a job in `status`: a PENDING job at its retry
    time (or, before its first attempt, a delayed job's schedule time: ENQUEUE writes
    it to next_attempt_at), or else when it last changed (enqueued, given back,
    retried by an operator);
    a PROCESSING job when its lease runs out; never, once terminal."""
    if status is JobStatus.PENDING:
        return Coalesce((New("next_attempt_at"), New("updated_at")))
    if status is JobStatus.PROCESSING:
        return New("lease_expires_at")
    return Lit(None)


# The same rule as a CHECK constraint (ck_async_jobs_due_at), null-safe: SQL's CHECK
# passes on NULL, so each branch says IS NOT NULL before comparing.
DUE_AT_CHECK_SQL = (
    "CASE status"
    " WHEN 'PENDING' THEN due_at IS NOT NULL"
    " AND due_at = COALESCE(next_attempt_at, updated_at)"
    " WHEN 'PROCESSING' THEN due_at IS NOT NULL AND lease_expires_at IS NOT NULL"
    " AND due_at = lease_expires_at"
    " ELSE due_at IS NULL END"
)


def _frozen(mapping: Mapping[str, Expr]) -> Mapping[str, Expr]:
    return MappingProxyType(dict(mapping))


_LEASE_EXPIRED_ERROR = (Lit(LEASE_EXPIRED_CODE), Lit(""), Lit(LEASE_EXPIRED_MESSAGE))
# The worker's writes about a job it claimed: that job (found by id, as the SQL's
# primary-key lookup needs), still owned by the caller's claim token.
_OWNED = frozenset({Requires.BY_ID, Requires.CLAIM_TOKEN})
_ARG_ERROR = (Arg("code"), Arg("reason"), Arg("message"))

ENQUEUE = Transition(
    name="enqueue",
    sources={NO_ROW: Source()},
    target=JobStatus.PENDING,
    sets=_frozen(
        {
            "id": Arg("job_id"),
            "job_type": Arg("job_type"),
            "target_id": Arg("target_id"),
            "request_params": Arg("request_params"),
            "requested_by": Arg("requested_by"),
            "request_id": Arg("request_id"),
            "traceparent": Arg("traceparent"),
            "tenant": Arg("tenant"),
            "attempt_count": Lit(0),
            "max_attempts": Arg("max_attempts"),
            "created_at": Now(),
            "updated_at": Now(),
            # A delayed job: the schedule time as given, and (while it is ahead) the
            # time its first attempt may start, from which due_at() derives.
            "scheduled_at": Arg("scheduled_at"),
            "next_attempt_at": Arg("not_before"),
            "priority": Arg("priority"),
        }
    ),
    args=(
        "job_id",
        "job_type",
        "target_id",
        "request_params",
        "requested_by",
        "request_id",
        "max_attempts",
        "traceparent",
        "tenant",
        "scheduled_at",
        "not_before",
        "priority",
    ),
)

# The separator of claim_type_args' list (job type names are words: no comma).
TYPE_LIST_SEPARATOR = ","


def claim_type_args(skip_types: Iterable[str], only_type: str | None) -> dict[str, str]:
    """CLAIM's arguments for Requires.TYPE_WANTED: the types not to claim as one text,
    ",A,B," (a type is skipped when ",type," occurs in it; "" skips none), and the one
    type to claim ("" for any). One text each keeps the claim a single prepared
    statement on both databases, whatever the number of paused types."""
    words = sorted(str(job_type) for job_type in skip_types)
    if any(TYPE_LIST_SEPARATOR in word for word in words):
        raise ValueError(f"a job type name holds {TYPE_LIST_SEPARATOR!r}: {words}")
    skip = f"{TYPE_LIST_SEPARATOR}{TYPE_LIST_SEPARATOR.join(words)}{TYPE_LIST_SEPARATOR}"
    return {"skip_types": skip if words else "", "only_type": only_type or ""}


# Oldest due first; a PROCESSING job is due when its lease expired (its worker was
# lost): that attempt is closed as LEASE_EXPIRED and a new one opens.
CLAIM = Transition(
    name="claim",
    sources={
        JobStatus.PENDING: Source(
            requires=frozenset({Requires.DUE, Requires.TYPE_WANTED}), attempts=(OpenAttempt(),)
        ),
        JobStatus.PROCESSING: Source(
            requires=frozenset({Requires.DUE, Requires.TYPE_WANTED, Requires.ATTEMPTS_LEFT}),
            attempts=(CloseAttempt(_LEASE_EXPIRED_ERROR), OpenAttempt()),
        ),
    },
    target=JobStatus.PROCESSING,
    sets=_frozen(
        {
            "claim_token": NewToken(),
            "lease_expires_at": LeaseUntil(),
            "started_at": Now(),
            "updated_at": Now(),
            "next_attempt_at": Lit(None),
            "attempt_count": Plus(Col("attempt_count"), Lit(1)),
            "error_code": BySource(
                {JobStatus.PROCESSING: _LEASE_EXPIRED_ERROR[0]}, Col("error_code")
            ),
            "error_reason": BySource(
                {JobStatus.PROCESSING: _LEASE_EXPIRED_ERROR[1]}, Col("error_reason")
            ),
            "error_message": BySource(
                {JobStatus.PROCESSING: _LEASE_EXPIRED_ERROR[2]}, Col("error_message")
            ),
        }
    ),
    args=("skip_types", "only_type"),
)

# Not a change of status: the owner pushes its lease (and so due_at) forward.
RENEW_LEASE = Transition(
    name="renew_lease",
    sources={JobStatus.PROCESSING: Source(requires=_OWNED)},
    target=JobStatus.PROCESSING,
    sets=_frozen({"lease_expires_at": LeaseUntil()}),
    args=("job_id", "token"),
    notifies=False,
)

COMPLETE = Transition(
    name="complete",
    sources={
        JobStatus.PROCESSING: Source(requires=_OWNED, attempts=(CloseAttempt(usage=Arg("usage")),))
    },
    target=JobStatus.COMPLETED,
    sets=_frozen({"result": Arg("result"), "completed_at": Now(), "updated_at": Now()}),
    args=("job_id", "token", "result", "usage"),
)

_FAILED_ATTEMPT = Source(requires=_OWNED, attempts=(CloseAttempt(_ARG_ERROR, usage=Arg("usage")),))
_ERROR_COLUMNS = {
    "error_code": Arg("code"),
    "error_reason": Arg("reason"),
    "error_message": Arg("message"),
    "updated_at": Now(),
}
_FAIL_ARGS = ("job_id", "token", "code", "reason", "message", "retry_at", "usage")

FAIL_AND_RETRY = Transition(
    name="fail_and_retry",
    sources={JobStatus.PROCESSING: _FAILED_ATTEMPT},
    target=JobStatus.PENDING,
    sets=_frozen(_ERROR_COLUMNS | {"next_attempt_at": Arg("retry_at")}),
    args=_FAIL_ARGS,
    when=NotNull(Arg("retry_at")),
)

FAIL_FINAL = Transition(
    name="fail_final",
    sources={JobStatus.PROCESSING: _FAILED_ATTEMPT},
    target=JobStatus.FAILED,
    sets=_frozen(_ERROR_COLUMNS | {"failed_at": Now(), "next_attempt_at": Lit(None)}),
    args=_FAIL_ARGS,
    when=IsNull(Arg("retry_at")),
)

# A PROCESSING job whose lease expired with no attempt left: its worker was lost.
LEASE_EXHAUSTED = Transition(
    name="lease_exhausted",
    sources={
        JobStatus.PROCESSING: Source(
            requires=frozenset({Requires.DUE, Requires.ATTEMPTS_USED}),
            attempts=(CloseAttempt(_LEASE_EXPIRED_ERROR),),
        )
    },
    target=JobStatus.FAILED,
    sets=_frozen(
        {
            "failed_at": Now(),
            "updated_at": Now(),
            "error_code": _LEASE_EXPIRED_ERROR[0],
            "error_reason": _LEASE_EXPIRED_ERROR[1],
            "error_message": _LEASE_EXPIRED_ERROR[2],
        }
    ),
)

# Clean shutdown: the claim is given back uncharged, due at once.
RELEASE = Transition(
    name="release",
    sources={JobStatus.PROCESSING: Source(requires=_OWNED, attempts=(DropAttempt(),))},
    target=JobStatus.PENDING,
    sets=_frozen(
        {
            "attempt_count": Plus(Col("attempt_count"), Lit(-1)),
            # The first attempt given back leaves the job as if never started.
            "started_at": When(AtMost(Col("attempt_count"), 1), Lit(None), Col("started_at")),
            "next_attempt_at": Lit(None),
            "updated_at": Now(),
        }
    ),
    args=("job_id", "token"),
)

_CANCELLABLE = frozenset({Requires.BY_ID, Requires.OWNER_IF_GIVEN})
CANCEL = Transition(
    name="cancel",
    sources={
        JobStatus.PENDING: Source(requires=_CANCELLABLE),
        JobStatus.PROCESSING: Source(
            requires=_CANCELLABLE,
            attempts=(CloseAttempt((Lit(CANCELLED_CODE), Lit(""), Arg("cancel_message"))),),
        ),
    },
    target=JobStatus.CANCELLED,
    sets=_frozen(
        {
            "cancelled_at": Now(),
            "cancel_reason": Arg("cancel_reason"),
            "next_attempt_at": Lit(None),
            "updated_at": Now(),
        }
    ),
    args=("job_id", "cancel_reason", "cancel_message", "owner"),
)

# An operator's RetryFailed: a fresh round of `extra_attempts`; the attempt history and
# the last error stay until the next outcome.
RETRY_FAILED = Transition(
    name="retry_failed",
    sources={JobStatus.FAILED: Source(requires=frozenset({Requires.BY_ID}))},
    target=JobStatus.PENDING,
    sets=_frozen(
        {
            "max_attempts": Plus(Col("attempt_count"), Arg("extra_attempts")),
            "failed_at": Lit(None),
            "next_attempt_at": Lit(None),
            "updated_at": Now(),
        }
    ),
    args=("job_id", "extra_attempts"),
)

TRANSITIONS: tuple[Transition, ...] = (
    ENQUEUE,
    CLAIM,
    RENEW_LEASE,
    COMPLETE,
    FAIL_AND_RETRY,
    FAIL_FINAL,
    LEASE_EXHAUSTED,
    RELEASE,
    CANCEL,
    RETRY_FAILED,
)


def declared_pairs() -> frozenset[tuple[JobStatus, JobStatus]]:
    """Every (from, to) status pair some transition makes, excluding writes that keep
    the status (a lease renewal)."""
    return frozenset(pair for t in TRANSITIONS if t is not RENEW_LEASE for pair in t.pairs)


def check_declarations() -> None:
    """The declarations make exactly the contract's transitions (domain.model); raises
    AssertionError naming the difference. Called by the tests and at import by both
    readers, so a declaration can never drift from the contract unnoticed."""
    made, allowed = declared_pairs(), ALLOWED_TRANSITIONS
    if made != allowed:
        raise AssertionError(
            f"declared but not allowed: {sorted(made - allowed)}; "
            f"allowed but never declared: {sorted(allowed - made)}"
        )
