"""The memory store does what the transition declarations say, and only that: a
changed declaration changes what it writes, an undeclared move is refused, and an
expression it cannot evaluate is an error, never a silent skip. (What each write
does is checked on every store by the contract suite, tests/integration/storage.)"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from san_jobs.job_service.domain.model import JobStatus, JobType, NewJob, OnDuplicate
from san_jobs.job_service.domain.ports import ClaimParams, EnqueueParams, ReleaseParams
from san_jobs.job_service.domain.transitions import RELEASE, Expr, Lit, Source, Transition
from san_jobs.job_service.storage import memory_worker
from san_jobs.job_service.storage.apply_transition import Call, apply, blank_row
from san_jobs.job_service.storage.memory import MemoryJobStore

NOW = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


def _new_job() -> NewJob:
    return NewJob(JobType.CARD_ANALYSIS, "t-1", {"text": "x"}, "tester", None, 3)


async def test_a_changed_declaration_changes_what_the_store_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = MemoryJobStore(clock=lambda: NOW)
    await store.commands.enqueue(EnqueueParams(job=_new_job(), on_duplicate=OnDuplicate.REJECT))
    (claim,) = await store.worker.claim(ClaimParams(limit=1, lease_seconds=60))
    marked = dataclasses.replace(
        RELEASE, sets={**RELEASE.sets, "cancel_reason": Lit("given back at shutdown")}
    )
    monkeypatch.setattr(memory_worker, "RELEASE", marked)
    released = await store.worker.release(ReleaseParams(job_id=claim.job.id, token=claim.token))
    assert released is not None and released.status is JobStatus.PENDING
    assert released.cancel_reason == "given back at shutdown"


def test_a_move_the_contract_does_not_allow_is_refused() -> None:
    reopen = Transition(
        name="reopen",
        sources={JobStatus.COMPLETED: Source()},
        target=JobStatus.PENDING,
        sets={"updated_at": Lit(None)},
    )
    row = blank_row() | {"status": JobStatus.COMPLETED.value}
    with pytest.raises(AssertionError, match="COMPLETED -> PENDING"):
        apply(reopen, row, Call(args={}, now=NOW))


def test_an_expression_it_cannot_evaluate_is_an_error() -> None:
    @dataclasses.dataclass(frozen=True)
    class Unknown(Expr):
        pass

    odd = dataclasses.replace(RELEASE, sets={**RELEASE.sets, "cancel_reason": Unknown()})
    row = blank_row() | {"status": JobStatus.PROCESSING.value, "claim_token": "t"}
    with pytest.raises(TypeError, match="no evaluation for the expression"):
        apply(odd, row, Call(args={"job_id": None, "token": "t"}, now=NOW))
