"""The SDK's watch lets through a waiting job's pause opening and closing (the
server sends the same PENDING state again with a new `waiting_for`)."""

from __future__ import annotations

from san_jobs.client._requests import ChangeFilter
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb


def test_a_pause_opening_or_closing_is_a_change_to_watch() -> None:
    pending = pb.Job(id="a", status=pb.JOB_STATUS_PENDING, attempt_count=1)
    waiting = pb.Job()
    waiting.CopyFrom(pending)
    waiting.waiting_for.reason = pb.PAUSE_REASON_CIRCUIT_OPEN
    waiting.waiting_for.since.seconds = 1_764_601_440
    changes = ChangeFilter()
    assert changes.is_new(pending)
    assert not changes.is_new(pending)
    assert changes.is_new(waiting)
    assert not changes.is_new(waiting)
    assert changes.is_new(pending)
