"""Job ids: canonical UUIDv7 text, increasing within a process, not guessable."""

from __future__ import annotations

import time
import uuid

import pytest

from san_jobs.job_service.domain import job_ids
from san_jobs.job_service.domain.job_ids import new_job_id


def test_an_id_is_a_canonical_uuid7_with_the_current_time() -> None:
    before = time.time_ns() // 1_000_000
    text = new_job_id()
    value = uuid.UUID(text)
    assert str(value) == text  # canonical: lowercase, hyphens where uuid puts them
    assert value.version == 7
    assert value.variant == uuid.RFC_4122
    milliseconds = value.int >> 80
    assert before <= milliseconds <= before + 1_000  # "+": ids may run a little ahead


def test_ids_of_one_process_increase_even_within_one_millisecond(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(job_ids.time, "time_ns", lambda: 1_700_000_000_000_000_000)
    monkeypatch.setattr(job_ids, "_last_milliseconds", -1)
    ids = [new_job_id() for _ in range(10_000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    times = [uuid.UUID(i).int >> 80 for i in ids]
    # The 12-bit counter keeps at least 2,048 ids in the true millisecond: a burst
    # does not push the time in the ids ahead of the clock (10,000 ids: at most 4 ms).
    assert times[:2_048] == [1_700_000_000_000] * 2_048
    assert times[-1] <= 1_700_000_000_000 + 4


def test_a_new_millisecond_starts_a_new_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1_700_000_000_000_000_000]
    monkeypatch.setattr(job_ids.time, "time_ns", lambda: clock[0])
    monkeypatch.setattr(job_ids, "_last_milliseconds", -1)
    first = [new_job_id() for _ in range(5)]
    clock[0] += 1_000_000
    later = new_job_id()
    assert uuid.UUID(later).int >> 80 == 1_700_000_000_001
    assert first == sorted(first) and later > first[-1]
    counters = [(uuid.UUID(i).int >> 64) & 0xFFF for i in first]
    assert counters == list(range(counters[0], counters[0] + 5))


def test_the_random_bits_differ_between_ids() -> None:
    randoms = {uuid.UUID(new_job_id()).int & ((1 << 62) - 1) for _ in range(100)}
    assert len(randoms) == 100
