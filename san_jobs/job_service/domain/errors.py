"""The service's own exceptions. Storage raises them instead of driver errors; the
transport layer maps each to one gRPC status in one place (transport/errors.py)."""

from __future__ import annotations

# One bad request field: the servers' shared value (AiGateway's errors hold it too).
from san_jobs.shared.field_violation import FieldViolation as FieldViolation


class JobServiceError(Exception):
    """Base of every error the service raises on purpose."""


class InvalidRequestError(JobServiceError):
    def __init__(self, violations: list[FieldViolation]) -> None:
        self.violations = violations
        super().__init__("; ".join(f"{v.field}: {v.description}" for v in violations))


class DuplicateJobError(JobServiceError):
    def __init__(self, existing_job_id: str) -> None:
        self.existing_job_id = existing_job_id
        super().__init__(
            f"an active job already exists for this job type and target: {existing_job_id}"
        )


class JobNotFoundError(JobServiceError):
    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id} not found")


class InvalidJobStateError(JobServiceError):
    def __init__(self, job_id: str, status: str, wanted: str) -> None:
        self.job_id = job_id
        self.status = status
        super().__init__(f"job {job_id} is {status}; {wanted}")


class UnauthenticatedError(JobServiceError):
    """No bearer token, or one that is unknown, malformed or revoked (--auth token)."""


class PermissionDeniedError(JobServiceError):
    """The caller's role may not make this call (the role table, auth/roles.py)."""

    def __init__(self, rpc: str, role: str, why: str = "") -> None:
        self.rpc = rpc
        self.role = role
        super().__init__(f"role {role} may not call {rpc}{': ' + why if why else ''}")


class StorageError(JobServiceError):
    """The database did not do the work. `str()` holds the driver's details, for the
    log only: what a caller reads is fixed per subclass (transport/errors.py)."""


class StorageUnavailableError(StorageError):
    """The database could not be reached: a lost connection, a database that is down
    or starting, no pool connection in time, a lock held too long. Worth retrying."""


class StorageDataError(StorageError):
    """The database refused a value (SQLSTATE class 22: too long, out of range, a
    character it cannot store). The caller's data: retrying the same will not help."""


class StorageFailureError(StorageError):
    """Any other refusal (an integrity violation nothing handles, an unknown table,
    a driver misuse): a bug or a broken schema, never the caller's fault."""


class PruneRunningError(JobServiceError):
    """A prune was asked for while one is running (on any instance on the database):
    the pruners' lock is held (san_jobs/job_service/pruner.py)."""

    def __init__(self) -> None:
        super().__init__("a prune is running now (on this or another instance); try again later")


class LeaseLostError(JobServiceError):
    """A write about a claimed job found another claim token: someone else owns it now."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id}: lease lost, the outcome was not written")


class QuotaExceededError(JobServiceError):
    """A caller reached one of its per-tenant caps (`cap` names the setting, e.g.
    max-pending-per-caller, `limit` its value): RESOURCE_EXHAUSTED naming it."""

    def __init__(self, cap: str, limit: int, tenant: str, message: str) -> None:
        self.cap = cap
        self.limit = limit
        self.tenant = tenant
        super().__init__(message)


class CursorExpiredError(JobServiceError):
    """StreamJobChanges was given a cursor whose changes are gone: older than what
    retention keeps, or of another feed (another database). Resuming anywhere else
    would skip changes without saying so; the caller decides (`oldest_cursor` is where
    the kept changes begin)."""

    def __init__(self, after_cursor: str, oldest_cursor: str, why: str) -> None:
        self.after_cursor = after_cursor
        self.oldest_cursor = oldest_cursor
        super().__init__(
            f"after_cursor {after_cursor!r}: {why}; the kept changes begin after {oldest_cursor!r}"
        )
