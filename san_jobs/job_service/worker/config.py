"""What every part of the worker shares: its settings, the constants other code
imports, and its logger (one name for all parts: operators filter on
"job_service.worker")."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from san_jobs.job_service.dispatch_breaker import BreakerConfig
from san_jobs.job_service.domain.backoff import BackoffPolicy
from san_jobs.job_service.domain.claim_limits import TypeLimit
from san_jobs.job_service.domain.job_types import default_deadlines
from san_jobs.job_service.domain.model import JobType

log = logging.getLogger("job_service.worker")

# Each type's default gateway deadline, from its registry entry (domain/job_types.py).
DEFAULT_DEADLINES: dict[JobType, float] = default_deadlines()
# Writes of an outcome are retried this often while the database is unreachable,
# so a short database blip does not throw away a finished model call.
OUTCOME_WRITE_TRIES = 5
# Why cancel_local stops a call when CancelJob cancelled its job.
CANCELLED_WHY = "the job was cancelled"
# Why the rescuer stops a call whose lease renewal found the job no longer ours.
LEASE_LOST_WHY = "the job is no longer ours (claimed again, or cancelled)"
# The error code counted when a job claimed ahead is given back because its type was
# paused before its call could start.
PAUSED_CODE = "PAUSED"
# Each completed attempt's line (DEBUG says when it was claimed).
COMPLETED_LINE = "job_id=%s completed: %s attempt %d/%d, gateway call %.0f ms"
# The outcomes of an attempt (its span's job.outcome) that are failures.
FAILED_OUTCOMES = frozenset({"failed", "retrying"})


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    concurrency: int = 10  # --workers (settings.py says why 10)
    # Jobs claimed beyond `concurrency`, each waiting (leased, renewed) for a gateway
    # slot. Without them the pool moves in lockstep under a backlog: every job in
    # flight is claimed, sent, answered and completed as one group, so the claim
    # and completion statements and the gateway take turns instead of overlapping.
    # With them the next group is already claimed when a group's answers arrive,
    # and goes to the gateway while that group's outcomes are written. Calls in
    # flight to the gateway stay at most `concurrency`. 0: claim only free slots.
    claim_ahead: int = 0
    lease_seconds: float = 60.0
    poll_interval: float = 1.0
    # Under load every enqueue commit wakes the worker. Claiming at once after each
    # would run one claim statement per enqueue batch, each costing the database
    # about 0.5 ms plus ~40 µs a row; a claim at most this often takes everything
    # that arrived meanwhile in one statement (a third of the statements at 2,000
    # jobs/s). A wake-up long after the last claim (light load) claims at once.
    batch_interval: float = 0.002
    deadlines: dict[JobType, float] = field(default_factory=lambda: dict(DEFAULT_DEADLINES))
    backoff: BackoffPolicy = field(default_factory=BackoffPolicy)
    # Dispatch pauses: circuit breaking and rate-limit pauses (dispatch_breaker.py).
    breaker: BreakerConfig = field(default_factory=BreakerConfig)
    # Claim limits by job type (--rate-limit, --concurrency-limit; domain/claim_limits.py):
    # each limited type is claimed on its own, as its limits allow; the rest as before.
    limits: dict[JobType, TypeLimit] = field(default_factory=dict)
    # Fair share (--max-running-per-caller): jobs of one caller (requested_by)
    # PROCESSING at most; None: claims take the oldest due jobs whoever asked.
    max_per_caller: int | None = None

    @property
    def claim_bound(self) -> int:
        """Jobs in flight at most: every call slot's, and those claimed ahead."""
        return self.concurrency + max(self.claim_ahead, 0)
