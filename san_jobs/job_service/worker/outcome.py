"""What one attempt came to: the executor's answer (or the pool's, when the attempt's
task was stopped), which the completer writes with the claim token. The hand-off
between the two: the executor never writes to the store, the completer never calls
the gateway."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from san_jobs.job_service.domain.model import Failure, GatewayAnswer, Job


@dataclass(frozen=True, slots=True)
class Completed:
    """The gateway answered: COMPLETED with the answer's result and usage."""

    answer: GatewayAnswer
    call_seconds: float  # the gateway call's, for the `completed` line
    word: ClassVar[str] = "completed"


@dataclass(frozen=True, slots=True)
class Retrying:
    """A transient failure with attempts left: charged, PENDING again after a backoff."""

    failure: Failure
    word: ClassVar[str] = "retrying"


@dataclass(frozen=True, slots=True)
class Failed:
    """A permanent failure, or the last attempt's: charged, FAILED."""

    failure: Failure
    word: ClassVar[str] = "failed"


@dataclass(frozen=True, slots=True)
class GivenBack:
    """The call failed and the dispatch breaker says the type is paused: PENDING again,
    the attempt not charged."""

    failure: Failure
    word: ClassVar[str] = "given_back"


@dataclass(frozen=True, slots=True)
class PausedWhileWaiting:
    """Claimed ahead, the job's type was paused before a call slot freed: no call;
    PENDING again, the attempt not charged."""

    word: ClassVar[str] = "given_back"


@dataclass(frozen=True, slots=True)
class Cancelled:
    """CancelJob cancelled the job during its attempt: the call was stopped, the job
    is CANCELLED already (nothing to write)."""

    why: str
    word: ClassVar[str] = "cancelled"


@dataclass(frozen=True, slots=True)
class LeaseLost:
    """Lease renewal found the job no longer ours: the call was stopped, another owner
    writes its outcome (nothing to write; counted where the loss was found)."""

    why: str
    word: ClassVar[str] = "cancelled"


@dataclass(frozen=True, slots=True)
class ShutDown:
    """Stopped at shutdown (past the grace period, or claimed ahead and never started):
    PENDING again, the attempt not charged."""

    word: ClassVar[str] = "cancelled"


# The outcomes the completer writes to the store with the claim token.
Written = Completed | Retrying | Failed | GivenBack | PausedWhileWaiting
# The outcomes of an attempt stopped from outside its task (Worker.cancel_local, the
# rescuer, Worker.stop): only a shutdown writes (a give-back).
Stopped = Cancelled | LeaseLost | ShutDown
Outcome = Written | Stopped


def charged(job: Job, failure: Failure) -> Retrying | Failed:
    """A failure charged to the attempt: retried if transient and attempts are left."""
    if failure.transient and job.attempt_count < job.max_attempts:
        return Retrying(failure)
    return Failed(failure)
