"""Failure groups (ListFailureGroups): the FAILED jobs of a time range counted by
error_code, error_reason and the start of error_message, largest group first. An
operator reads them before choosing a RetryFailed filter. Every store answers the same
question the same way (tests/integration/storage hold them to it).

The range is bounded (at most :data:`MAX_FAILURE_RANGE_SECONDS`) so that the query
reads only the failures of that range through the index on failed jobs by time
(migration 0009), never the whole table.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from san_jobs.job_service.domain.model import JobFilter, JobStatus, JobType

# A group's message is this many characters of error_message: enough to tell
# "Timeout: ..." from "Token limit exceeded (9000 > 8192)", short enough that the
# varying tail (ids, counts) of one kind of failure mostly falls outside it.
MESSAGE_PREFIX_CHARS = 80
# Groups in one answer; the rest are left out (truncated).
MAX_FAILURE_GROUPS = 100
# Unset failed_after means this long before failed_before.
DEFAULT_FAILURE_RANGE_SECONDS = 24 * 3600
MAX_FAILURE_RANGE_SECONDS = 31 * 24 * 3600


@dataclass(frozen=True, slots=True)
class FailureQuery:
    """FAILED jobs whose failed_at is in [failed_after, failed_before), of these job
    types (empty: all)."""

    failed_after: datetime
    failed_before: datetime
    job_types: tuple[JobType, ...] = ()

    def job_filter(self) -> JobFilter:
        """The same selection as a JobFilter (what RetryFailed would match)."""
        return JobFilter(
            statuses=(JobStatus.FAILED,),
            job_types=self.job_types,
            failed_after=self.failed_after,
            failed_before=self.failed_before,
        )


@dataclass(frozen=True, slots=True)
class FailureGroup:
    """The FAILED jobs sharing (error_code, error_reason, message_prefix); a missing
    code, reason or message counts as the empty string."""

    error_code: str
    error_reason: str
    message_prefix: str
    count: int
    latest_failed_at: datetime
    # One job of the group (the greatest id: any one would do, and this one is cheap
    # to find in the same GROUP BY).
    example_job_id: str


def message_prefix(error_message: str | None) -> str:
    """The part of an error_message that names its group (characters, not bytes)."""
    return (error_message or "")[:MESSAGE_PREFIX_CHARS]


def group_order(group: FailureGroup) -> tuple[int, float, str, str, str]:
    """The order of the groups in every answer: count descending, then the most
    recent failure first, then the key (so that ties come out the same everywhere)."""
    return (
        -group.count,
        -group.latest_failed_at.timestamp(),
        group.error_code,
        group.error_reason,
        group.message_prefix,
    )
