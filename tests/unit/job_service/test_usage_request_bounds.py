"""GetUsage's request as a domain query: defaults filled in, the range bounded
(limits.MAX_USAGE_RANGE_SECONDS), bad values named by field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from san_jobs.job_service.domain.errors import InvalidRequestError
from san_jobs.job_service.domain.limits import DEFAULT_USAGE_RANGE_SECONDS, MAX_USAGE_RANGE_SECONDS
from san_jobs.job_service.domain.model import JobType
from san_jobs.job_service.transport import requests
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def stamp(value: datetime) -> Timestamp:
    out = Timestamp()
    out.FromDatetime(value)
    return out


def test_defaults_are_the_last_day_up_to_now_and_the_owner_is_kept() -> None:
    query = requests.usage(pb.GetUsageRequest(job_types=[pb.JOB_TYPE_EMBEDDING]), NOW, "alice")
    assert query.end == NOW
    assert query.start == NOW - timedelta(seconds=DEFAULT_USAGE_RANGE_SECONDS)
    assert (query.job_types, query.requested_by) == ((JobType.EMBEDDING,), "alice")


def test_the_longest_range_is_allowed_and_one_second_more_is_not() -> None:
    start = NOW - timedelta(seconds=MAX_USAGE_RANGE_SECONDS)
    longest = pb.GetUsageRequest(start_time=stamp(start), end_time=stamp(NOW))
    assert requests.usage(longest, NOW, None).start == start
    longest.start_time.CopyFrom(stamp(start - timedelta(seconds=1)))
    with pytest.raises(InvalidRequestError, match="end_time: at most 366 days"):
        requests.usage(longest, NOW, None)


@pytest.mark.parametrize("offset", [0, 60])
def test_an_empty_or_reversed_range_is_refused(offset: int) -> None:
    start = NOW + timedelta(seconds=offset)
    request = pb.GetUsageRequest(start_time=stamp(start), end_time=stamp(NOW))
    with pytest.raises(InvalidRequestError, match="start_time: must be before end_time"):
        requests.usage(request, NOW, None)


def test_an_unknown_job_type_is_named() -> None:
    with pytest.raises(InvalidRequestError, match=r"job_types\[0\]"):
        requests.usage(pb.GetUsageRequest(job_types=[999]), NOW, None)
