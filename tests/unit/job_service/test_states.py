"""The state machine of docs/contract.md, "States"."""

from __future__ import annotations

import itertools

from san_jobs.job_service.domain.model import JobStatus, can_transition

P, R, C, F, X = (
    JobStatus.PENDING,
    JobStatus.PROCESSING,
    JobStatus.COMPLETED,
    JobStatus.FAILED,
    JobStatus.CANCELLED,
)
ALLOWED = {(P, R), (R, C), (R, F), (R, P), (R, R), (F, P), (P, X), (R, X)}


def test_exactly_the_contract_transitions_are_allowed() -> None:
    for source, target in itertools.product(JobStatus, JobStatus):
        assert can_transition(source, target) == ((source, target) in ALLOWED), (source, target)


def test_terminal_and_active_sets() -> None:
    assert {s for s in JobStatus if s.is_terminal} == {C, F, X}
    assert {s for s in JobStatus if s.is_active} == {P, R}


def test_values_are_plain_words() -> None:
    assert [s.value for s in JobStatus] == [
        "PENDING",
        "PROCESSING",
        "COMPLETED",
        "FAILED",
        "CANCELLED",
    ]
