"""The transition declarations (domain/transitions.py) agree with the domain's contract
and with the JobStore port, and the attempt record's shape is defined once."""

from __future__ import annotations

import inspect
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from san_jobs.job_service.domain import transitions as tr
from san_jobs.job_service.domain.model import ALLOWED_TRANSITIONS, JobAttempt, JobStatus
from san_jobs.job_service.domain.ports import (
    JobCommands,
    JobQueries,
    JobStore,
    PauseStore,
    RetentionStore,
    WorkerStore,
)

# The ports over async_jobs' rows.
PORTS = (JobStore, JobCommands, WorkerStore, JobQueries, PauseStore, RetentionStore)
# Which declarations each write of those ports applies. Every port method is a
# write (here) or a read (READS): a new write without a declaration fails below.
PORT_WRITES: dict[str, tuple[tr.Transition, ...]] = {
    "enqueue": (tr.ENQUEUE,),
    "enqueue_many": (tr.ENQUEUE,),
    "claim": (tr.CLAIM,),
    "claim_limited": (tr.CLAIM,),
    "fail_exhausted_leases": (tr.LEASE_EXHAUSTED,),
    "renew_leases": (tr.RENEW_LEASE,),
    "complete": (tr.COMPLETE,),
    "fail": (tr.FAIL_AND_RETRY, tr.FAIL_FINAL),
    "release": (tr.RELEASE,),
    "cancel": (tr.CANCEL,),
    "retry_failed": (tr.RETRY_FAILED,),
}
# The last resort of an outcome that could not be written: FAIL_FINAL's statement,
# and the dependents cancelled without the trigger (storage/dependencies.py).
FALLBACKS = {"end_unsettled"}
READS = {
    # What a waiting job waits on (Job.waiting_on), and who waits on these jobs.
    "with_waiting_on",
    "dependents_moved_by",
    "get",
    "get_many",
    # --max-pending-per-caller (pending_quota.py).
    "pending_count",
    "list_jobs",
    "stats",
    "next_due_at",
    "close",
    "ping",
    "usage_totals",
    "failure_groups",
}
# Not job-state writes: the rows of dispatch_pauses (domain/dispatch.py).
DISPATCH_PAUSES = {"dispatch_pauses", "open_pause", "close_pause", "take_probe"}
# Not job-state writes: the counts kept beside async_jobs (storage/counts.py).
COUNTS = {"fold_counts"}
# Not transitions: the pruner deletes terminal rows whole (storage/prune.py); the
# lock is the pruners' turn, count_prunable a read.
RETENTION = {"count_prunable", "prune_batch", "prune_lock"}


def test_the_declarations_make_exactly_the_allowed_transitions() -> None:
    tr.check_declarations()
    assert tr.declared_pairs() == ALLOWED_TRANSITIONS


def test_a_declaration_the_domain_does_not_allow_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    declared = tr.TRANSITIONS
    sneaky = replace(tr.RETRY_FAILED, sources={JobStatus.CANCELLED: tr.Source()})
    monkeypatch.setattr(tr, "TRANSITIONS", (*declared, sneaky))
    with pytest.raises(AssertionError, match=r"declared but not allowed.*CANCELLED"):
        tr.check_declarations()
    # And one the domain allows that nothing declares.
    without_retry = tuple(t for t in declared if t is not tr.RETRY_FAILED)
    monkeypatch.setattr(tr, "TRANSITIONS", without_retry)
    with pytest.raises(AssertionError, match=r"allowed but never declared.*FAILED"):
        tr.check_declarations()


@pytest.mark.parametrize("transition", tr.TRANSITIONS, ids=lambda t: t.name)
def test_every_source_is_a_real_status_and_only_enqueue_inserts(
    transition: tr.Transition,
) -> None:
    for source in transition.sources:
        if source is tr.NO_ROW:
            assert transition is tr.ENQUEUE
        else:
            assert isinstance(source, JobStatus) and source in set(JobStatus)
    assert isinstance(transition.target, JobStatus)


@pytest.mark.parametrize("transition", tr.TRANSITIONS, ids=lambda t: t.name)
def test_leaving_processing_clears_the_claim_and_due_at_is_derived(
    transition: tr.Transition,
) -> None:
    columns = transition.columns()
    assert columns["status"] == tr.Lit(transition.target.value)
    assert columns["due_at"] == tr.due_at(transition.target)
    if transition.target is not JobStatus.PROCESSING:
        assert columns["claim_token"] == tr.Lit(None)
        assert columns["lease_expires_at"] == tr.Lit(None)
    else:
        assert columns["lease_expires_at"] == tr.LeaseUntil()
    # Nobody writes status or due_at by hand.
    assert "status" not in transition.sets and "due_at" not in transition.sets


def test_due_at_is_never_set_for_a_terminal_status() -> None:
    for status in JobStatus:
        if status.is_terminal:
            assert tr.due_at(status) == tr.Lit(None)
        else:
            assert tr.due_at(status) != tr.Lit(None)


@pytest.mark.parametrize("transition", tr.TRANSITIONS, ids=lambda t: t.name)
def test_every_argument_a_declaration_reads_is_declared(transition: tr.Transition) -> None:
    """Arg(x) anywhere in a declaration names one of its `args`."""
    used: set[str] = set()

    def visit(value: object) -> None:
        if isinstance(value, tr.Arg):
            used.add(value.name)
        elif isinstance(value, tr.Expr):
            for field in value.__dataclass_fields__:  # type: ignore[attr-defined]
                visit(getattr(value, field))
        elif isinstance(value, tuple | list):
            for item in value:
                visit(item)
        elif hasattr(value, "values"):
            for item in value.values():
                visit(item)

    visit(dict(transition.sets))
    visit(transition.when)
    for source in transition.sources.values():
        for edit in source.attempts:
            if isinstance(edit, tr.CloseAttempt):
                visit(edit.error)
                visit(edit.usage)
    assert used <= set(transition.args)


def test_each_write_of_the_port_maps_to_a_declaration() -> None:
    methods = {
        name
        for port in PORTS
        for name, _ in inspect.getmembers(port, predicate=inspect.isfunction)
        if not name.startswith("_")
    }
    assert methods == set(PORT_WRITES) | FALLBACKS | READS | DISPATCH_PAUSES | COUNTS | RETENTION
    used = {t.name for declared in PORT_WRITES.values() for t in declared}
    assert used == {t.name for t in tr.TRANSITIONS}


def test_the_attempt_record_shape_is_the_job_attempts_fields() -> None:
    attempt = JobAttempt(
        attempt=2,
        start_time=datetime(2025, 1, 1, tzinfo=UTC),
        end_time=datetime(2025, 1, 1, 0, 1, tzinfo=UTC),
        error_code="DEADLINE_EXCEEDED",
        error_reason="r",
        error_message="m",
    )
    as_json = attempt.to_json()
    assert tuple(as_json) == tr.ATTEMPT_FIELDS
    assert as_json["start_time"] == "2025-01-01T00:00:00+00:00"
    assert JobAttempt.from_json(as_json) == attempt
