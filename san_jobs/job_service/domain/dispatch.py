"""Dispatch pauses: a job type whose provider is failing or throttling is not claimed.

One row per paused job type is shared by every instance on the database (table
`dispatch_pauses`), so a circuit one instance opens stops all of them. Jobs of a
paused type stay PENDING and are not charged attempts; only a probe is sent, at most
one per probe interval across the cluster, and its success closes the pause.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

from san_jobs.job_service.domain.model import JobType


class PauseReason(enum.StrEnum):
    """Why a job type is not being claimed; the words stored in `dispatch_pauses.reason`."""

    # --breaker-failures transient failures (UNAVAILABLE, DEADLINE_EXCEEDED) in a row.
    CIRCUIT_OPEN = "CIRCUIT_OPEN"
    # The gateway answered RESOURCE_EXHAUSTED / RATE_LIMITED with a RetryInfo.
    RATE_LIMITED = "RATE_LIMITED"


@dataclass(frozen=True, slots=True)
class DispatchPause:
    """A paused job type, as every instance sees it."""

    job_type: JobType
    reason: PauseReason
    # When the type was first paused in this outage (kept while the pause is renewed):
    # past --breaker-max-pause from it, jobs fail as they did without the breaker.
    since: datetime
    # RATE_LIMITED: when the RetryInfo delay ends (claiming resumes then by itself).
    # CIRCUIT_OPEN: when the next probe may be sent.
    until: datetime
    # The failure that opened (or last renewed) the pause, readable and truncated.
    last_error: str
    # The instance that opened it (its --instance-id).
    opened_by: str
