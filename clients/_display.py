"""How jobs read to people, shared by jobsctl and san-web: plain-word names of the
contract's enums and one time format."""

from __future__ import annotations

from datetime import UTC

from google.protobuf.timestamp_pb2 import Timestamp
from san.jobs.v1 import job_service_pb2 as pb


def job_type_name(value: pb.JobType.ValueType) -> str:
    """``CARD_ANALYSIS`` for ``JOB_TYPE_CARD_ANALYSIS``."""
    return pb.JobType.Name(value).removeprefix("JOB_TYPE_")


def status_name(value: pb.JobStatus.ValueType) -> str:
    """``COMPLETED`` for ``JOB_STATUS_COMPLETED``."""
    return pb.JobStatus.Name(value).removeprefix("JOB_STATUS_")


def format_time(stamp: Timestamp) -> str:
    """``2026-11-29T12:00:01Z``, or ``-`` when unset."""
    if stamp.seconds == 0 and stamp.nanos == 0:
        return "-"
    return stamp.ToDatetime(tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
