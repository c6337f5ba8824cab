"""The worker pool: claims due jobs, runs each through AiGateway outside any
database transaction, renews leases, and writes the outcome with the claim token.

Bounded concurrency: at most `concurrency` jobs are in flight; claims are batched
(one statement takes every free slot's worth of due jobs), and so is lease renewal
(one statement renews every lease this instance holds, every lease/3 seconds).

In parts, each with one job: the producer (producer.py) claims, the executor
(executor.py) waits for a call slot and calls the gateway, making a `Claim` an
`Outcome` (outcome.py), the completer (completer.py) writes that outcome, the rescuer
(rescuer.py) renews leases and fails the jobs whose last lease expired; the `Worker`
(pool.py) wires them and holds the jobs in flight. The store is called by the
producer, the completer and the rescuer only.
"""

from san_jobs.job_service.worker.config import (
    CANCELLED_WHY,
    COMPLETED_LINE,
    DEFAULT_DEADLINES,
    FAILED_OUTCOMES,
    LEASE_LOST_WHY,
    OUTCOME_WRITE_TRIES,
    PAUSED_CODE,
    WorkerConfig,
)
from san_jobs.job_service.worker.executor import CallSlots
from san_jobs.job_service.worker.outcome import Outcome
from san_jobs.job_service.worker.pool import Worker

__all__ = [
    "CANCELLED_WHY",
    "COMPLETED_LINE",
    "DEFAULT_DEADLINES",
    "FAILED_OUTCOMES",
    "LEASE_LOST_WHY",
    "OUTCOME_WRITE_TRIES",
    "PAUSED_CODE",
    "CallSlots",
    "Outcome",
    "Worker",
    "WorkerConfig",
]
