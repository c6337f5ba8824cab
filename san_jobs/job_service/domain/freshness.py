"""Which of two states of one job is the later one: the rule behind "one message per
change, in order per job" (docs/contract.md, "StreamJobUpdates").

A job's states reach an instance by paths that may cross:

- this instance's own write, published right after its commit;
- a re-read after another instance's NOTIFY (or after the listener reconnects), which
  returns whatever the row held when the read ran: possibly older than a write this
  instance published meanwhile, and often the very state already published;
- the snapshot a stream reads when it opens (it subscribes first, so the same state
  may come again through the hub).

So a state may arrive twice, and an older one may arrive last. Every write stamps
`updated_at` from the writing instance's clock; that orders most states, but not all:

- two writes within one clock tick (a coarse clock, or a test's clock held still)
  carry the same `updated_at`. The same status and attempt count then mean the same
  write seen twice. Anything else is a different write, and arrival order is the best
  guess left: a retry (PROCESSING -> PENDING) keeps the attempt count, a give-back at
  shutdown lowers it, so neither the status nor the count orders such a pair.
- instances' clocks differ: a CancelJob served by an instance whose clock is behind
  can stamp an earlier `updated_at` than the PROCESSING it ends. A status that no
  transition leaves (COMPLETED, CANCELLED: `model.ALLOWED_TRANSITIONS`) is the last
  state its job ever has, whatever the stamps say, so it always wins and is never
  replaced. (FAILED is left by RetryFailed, so it is ordered by time like the rest.)
"""

from __future__ import annotations

from san_jobs.job_service.domain.model import Job, JobStatus, can_transition

# The statuses no transition leaves: a job in one has reached its last state.
FINAL_STATUSES = frozenset(
    status for status in JobStatus if not any(can_transition(status, then) for then in JobStatus)
)


def supersedes(candidate: Job, current: Job) -> bool:
    """Whether `candidate` is a later state of the job than `current` (the same job's),
    so that a reader holding `current` should take it; see the module docstring."""
    if current.status in FINAL_STATUSES:
        return False
    if candidate.status in FINAL_STATUSES:
        return True
    if candidate.updated_at != current.updated_at:
        return candidate.updated_at > current.updated_at
    return candidate.status != current.status or candidate.attempt_count != current.attempt_count
