"""Which of two states of a job is the later one (domain/freshness.py), and the two
readers that rely on it: the hub's per-subscriber buffer and a job-id stream."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from san_jobs.job_service.domain.freshness import FINAL_STATUSES, supersedes
from san_jobs.job_service.domain.model import Job, JobStatus, JobType
from san_jobs.job_service.domain.validation import EnqueueLimits
from san_jobs.job_service.transport.servicer import JobServiceServicer
from san_jobs.job_service.transport.stream_limits import StreamGate, StreamLimits
from san_jobs.job_service.updates import UpdateHub

T0 = datetime(2026, 11, 29, tzinfo=UTC)
P, R, C, F, X = (
    JobStatus.PENDING,
    JobStatus.PROCESSING,
    JobStatus.COMPLETED,
    JobStatus.FAILED,
    JobStatus.CANCELLED,
)


def state(status: JobStatus, at: float = 0, attempts: int = 1, job_id: str = "a") -> Job:
    return Job(
        id=job_id,
        job_type=JobType.CARD_ANALYSIS,
        status=status,
        target_id="t",
        request_params={"text": "x"},
        requested_by="",
        request_id=None,
        result=None,
        error_message=None,
        error_code=None,
        error_reason=None,
        attempt_count=attempts,
        max_attempts=3,
        created_at=T0,
        updated_at=T0 + timedelta(seconds=at),
        started_at=None,
        completed_at=None,
        failed_at=None,
        cancelled_at=None,
        cancel_reason=None,
        next_attempt_at=None,
        lease_expires_at=None,
        claim_token=None,
    )


def test_final_statuses_are_those_no_transition_leaves() -> None:
    # FAILED is terminal for a stream but not final: RetryFailed moves it to PENDING.
    assert {C, X} == FINAL_STATUSES


def test_a_later_stamp_wins_and_an_earlier_one_loses() -> None:
    assert supersedes(state(R, at=2), state(P, at=1, attempts=0))
    assert not supersedes(state(P, at=1, attempts=0), state(R, at=2))


def test_the_same_write_seen_twice_is_not_news() -> None:
    # Its own publish, then the re-read after a NOTIFY (or a stream's snapshot).
    assert not supersedes(state(R, at=1), state(R, at=1))
    assert not supersedes(state(F, at=1), state(F, at=1))


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (state(R, attempts=1), state(P, attempts=1)),  # failed attempt, retry later
        (state(P, attempts=0), state(R, attempts=1)),  # claimed
        (state(R, attempts=1), state(P, attempts=0)),  # given back at shutdown
        (state(R, attempts=1), state(R, attempts=2)),  # lease expired, claimed again
        (state(F, attempts=3), state(P, attempts=3)),  # RetryFailed
    ],
)
def test_a_different_write_in_the_same_clock_tick_is_taken(before: Job, after: Job) -> None:
    assert before.updated_at == after.updated_at
    assert supersedes(after, before)


@pytest.mark.parametrize("final", [C, X])
def test_a_final_state_is_never_replaced(final: JobStatus) -> None:
    done = state(final, at=5)
    for later in (state(R, at=6, attempts=2), state(P, at=5), state(F, at=9)):
        assert not supersedes(later, done)


@pytest.mark.parametrize("final", [C, X])
def test_a_final_state_wins_whatever_its_stamp(final: JobStatus) -> None:
    # Stamped by another instance whose clock is behind this one's.
    assert supersedes(state(final, at=3), state(R, at=5))
    assert supersedes(state(final, at=5), state(P, at=5, attempts=0))


def test_failed_is_ordered_by_time_like_any_state_it_can_leave() -> None:
    assert supersedes(state(P, at=6, attempts=3), state(F, at=5, attempts=3))  # RetryFailed
    assert not supersedes(state(R, at=4, attempts=3), state(F, at=5, attempts=3))


async def test_the_hub_takes_a_cancel_stamped_by_a_slower_clock() -> None:
    hub = UpdateHub()
    sub = hub.subscribe(job_ids=["a"])
    hub.publish([state(R, at=5)])
    hub.publish([state(X, at=3)])
    assert [j.status for j in await sub.get()] == [X]


async def test_the_hub_keeps_a_final_state_over_a_late_read_of_the_same_instant() -> None:
    hub = UpdateHub()
    sub = hub.subscribe(job_ids=["a"])
    hub.publish([state(C, at=5)])
    hub.publish([state(R, at=5)])
    assert [j.status for j in await sub.get()] == [C]


class _App:
    """The one thing a job-id stream reads from the application: its snapshot."""

    def __init__(self, snapshot: Sequence[Job]) -> None:
        self._snapshot = {job.id: job for job in snapshot}

    async def load(self, job_ids: Sequence[str], owner: str | None = None) -> dict[str, Job]:
        return {i: self._snapshot[i] for i in job_ids if i in self._snapshot}


class _Batches:
    """A subscription that hands out the given batches of changes, one per get(), as
    the hub does when the stream keeps up (the hub's own buffer is tested above)."""

    def __init__(self, batches: Sequence[Sequence[Job]]) -> None:
        self._batches = [list(batch) for batch in batches]

    async def get(self) -> list[Job]:
        if not self._batches:
            raise AssertionError("the stream still waits after the last change")
        return self._batches.pop(0)


async def _stream(snapshot: Sequence[Job], batches: Sequence[Sequence[Job]]) -> list[Job]:
    """What a stream of the snapshot's jobs sends, the changes coming as `batches`."""
    gate = StreamGate(StreamLimits(10, 10, 10, 10, 10))
    app: Any = _App(snapshot)
    servicer = JobServiceServicer(app, EnqueueLimits(), 3, stream_gate=gate)
    job_ids = tuple(job.id for job in snapshot)
    return [job async for job in servicer._watch_jobs(job_ids, _Batches(batches), None)]


async def test_a_stream_sends_each_change_once_and_in_order() -> None:
    batches = [
        [state(R, at=1)],
        [state(P, at=1)],
        [state(R, at=2, attempts=2)],
        [state(C, at=3, attempts=2)],
    ]
    sent = await _stream([state(R, at=1)], batches)
    assert [(j.status, j.attempt_count) for j in sent] == [(R, 1), (P, 1), (R, 2), (C, 2)]


async def test_a_stream_ends_on_a_cancel_stamped_by_a_slower_clock() -> None:
    sent = await _stream([state(R, at=5)], [[state(X, at=3)]])
    assert [j.status for j in sent] == [R, X]


async def test_a_stream_sends_nothing_of_a_job_after_its_final_state() -> None:
    a, b = state(R, at=1, job_id="a"), state(R, at=1, job_id="b")
    batches = [
        [state(C, at=2, job_id="a")],
        [state(R, at=2, job_id="a")],  # a late read of the same instant
        [state(C, at=3, job_id="b")],
    ]
    sent = await _stream([a, b], batches)
    assert [(j.id, j.status) for j in sent] == [("a", R), ("b", R), ("a", C), ("b", C)]
