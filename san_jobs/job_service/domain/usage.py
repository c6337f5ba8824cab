"""Usage sums (GetUsage): what the attempts' gateway calls consumed, grouped by job
type, model and caller, over a range of attempt end times. Every store answers the
same question the same way (tests/integration/storage hold them to it)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from san_jobs.job_service.domain.model import JobAttempt, JobType


@dataclass(frozen=True, slots=True)
class UsageQuery:
    """Attempts that ended in [start, end), with usage; of these job types (empty:
    all), of this caller's jobs (None: anyone's)."""

    start: datetime
    end: datetime
    job_types: tuple[JobType, ...] = ()
    requested_by: str | None = None

    def counts(self, job_type: JobType, requested_by: str, attempt: JobAttempt) -> bool:
        """Whether `attempt` of a job of `job_type` by `requested_by` is summed."""
        if attempt.usage is None or attempt.end_time is None:
            return False
        if self.job_types and job_type not in self.job_types:
            return False
        if self.requested_by is not None and requested_by != self.requested_by:
            return False
        return self.start <= attempt.end_time < self.end


@dataclass(frozen=True, slots=True)
class UsageTotal:
    """The usage of one (job type, model, caller) group."""

    job_type: JobType
    model: str
    requested_by: str
    attempts: int
    cached_attempts: int
    input_tokens: int
    output_tokens: int
    duration_seconds: float


def group_key(total: UsageTotal) -> tuple[str, str, str]:
    """The order of the groups in every answer: job type, model, caller."""
    return (total.job_type.value, total.model, total.requested_by)
