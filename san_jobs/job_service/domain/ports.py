"""The ports the service's core depends on. Storage implements JobStore; the worker
and the servicers depend on this Protocol, never on a session or an engine."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from san_jobs.job_service.domain.changes import ChangeFilter, FeedState, JobChange
from san_jobs.job_service.domain.claim_limits import LimitedClaim, TypeLimit
from san_jobs.job_service.domain.dispatch import DispatchPause, PauseReason
from san_jobs.job_service.domain.errors import JobServiceError
from san_jobs.job_service.domain.failure_groups import FailureGroup, FailureQuery
from san_jobs.job_service.domain.model import (
    AttemptUsage,
    Claim,
    Failure,
    GatewayAnswer,
    Job,
    JobFilter,
    JobStats,
    JobStatus,
    JobType,
    JsonDict,
    NewJob,
    OnDuplicate,
    RetryOutcome,
)
from san_jobs.job_service.domain.schedules import FireOutcome, NewSchedule, Schedule
from san_jobs.job_service.domain.usage import UsageQuery, UsageTotal

# One item of `JobCommands.enqueue_many`: (job, deduplicated) as `enqueue` returns, or the
# error `enqueue` would have raised for that item alone: DuplicateJobError, or a
# StorageError other than StorageUnavailableError (the database refused its data).
EnqueueOutcome = tuple[Job, bool] | JobServiceError


# -- One parameter object per store operation that takes more than one value -----------
# (River's driver style: a call names what it sends, and adding a field to an operation
# changes its parameter object, the SQL store and the memory store, nothing else.)


@dataclass(frozen=True, slots=True)
class EnqueueParams:
    job: NewJob
    on_duplicate: OnDuplicate = OnDuplicate.REJECT


@dataclass(frozen=True, slots=True)
class ListJobsParams:
    job_filter: JobFilter
    page_size: int
    page_token: str | None = None


@dataclass(frozen=True, slots=True)
class ClaimParams:
    limit: int
    lease_seconds: float
    # Paused types (domain/dispatch.py): none of them is claimed.
    skip_types: frozenset[JobType] = frozenset()
    # A probe: only this type.
    only_type: JobType | None = None
    # Fair share: no caller (requested_by) gets more than this many PROCESSING.
    max_per_caller: int | None = None


@dataclass(frozen=True, slots=True)
class LimitedClaimParams:
    job_type: JobType
    limit: int
    lease_seconds: float
    type_limit: TypeLimit
    max_per_caller: int | None = None


@dataclass(frozen=True, slots=True)
class RenewLeasesParams:
    # (job id, claim token) pairs.
    leases: Sequence[tuple[str, str]]
    lease_seconds: float


@dataclass(frozen=True, slots=True)
class CompleteParams:
    job_id: str
    token: str
    result: JsonDict
    usage: AttemptUsage | None = None
    # The job as `token` claimed it (the worker's): the columns no write after ENQUEUE
    # changes are then taken from it, not read back (storage/outcome_rows.py).
    claimed: Job | None = None


@dataclass(frozen=True, slots=True)
class FailParams:
    job_id: str
    token: str
    failure: Failure
    # Set: back to PENDING, due then. None: FAILED.
    retry_at: datetime | None
    claimed: Job | None = None


@dataclass(frozen=True, slots=True)
class ReleaseParams:
    job_id: str
    token: str


@dataclass(frozen=True, slots=True)
class CancelParams:
    job_id: str
    reason: str
    # Set: only a job whose requested_by is `owner` moves.
    owner: str | None = None


@dataclass(frozen=True, slots=True)
class RetryFailedParams:
    job_filter: JobFilter
    limit: int
    dry_run: bool
    extra_attempts: int


@dataclass(frozen=True, slots=True)
class UsageTotalsParams:
    query: UsageQuery
    max_groups: int


@dataclass(frozen=True, slots=True)
class FailureGroupsParams:
    query: FailureQuery
    max_groups: int


@dataclass(frozen=True, slots=True)
class OpenPauseParams:
    job_type: JobType
    reason: PauseReason
    until: datetime
    last_error: str
    instance_id: str


@dataclass(frozen=True, slots=True)
class TakeProbeParams:
    job_type: JobType
    next_probe_at: datetime


@dataclass(frozen=True, slots=True)
class CountPrunableParams:
    cutoffs: Mapping[JobStatus, datetime]
    limit: int


@dataclass(frozen=True, slots=True)
class PruneBatchParams:
    status: JobStatus
    cutoff: datetime
    limit: int


@dataclass(frozen=True, slots=True)
class ReadChangesParams:
    # Changes with after_pos < pos <= through_pos, the filter's only.
    after_pos: int
    through_pos: int
    change_filter: ChangeFilter
    limit: int


@dataclass(frozen=True, slots=True)
class PruneChangesParams:
    cutoff: datetime
    limit: int


@dataclass(frozen=True, slots=True)
class PendingCountParams:
    tenant: str
    # Counted up to this many: a bigger count reads as `at_most`.
    at_most: int


@dataclass(frozen=True, slots=True)
class CreateScheduleParams:
    schedule: NewSchedule
    # The tenant's cap (--max-schedules-per-caller); None: no cap.
    max_per_tenant: int | None = None


@dataclass(frozen=True, slots=True)
class FindSchedulesParams:
    schedule_id: str
    # That tenant's schedule (at most one); None: every tenant's of that id.
    tenant: str | None


@dataclass(frozen=True, slots=True)
class ListSchedulesParams:
    # One tenant's schedules; None: every tenant's.
    tenant: str | None
    page_size: int
    # The (schedule_id, tenant) the page starts after; None: the first page.
    after: tuple[str, str] | None = None


@dataclass(frozen=True, slots=True)
class ScheduleKey:
    """One schedule, as delete_schedule, pause_schedule and resume_schedule take it
    (their whole parameter object: as FailParams is fail's and end_unsettled's)."""

    tenant: str
    schedule_id: str


@dataclass(frozen=True, slots=True)
class FireDueParams:
    # At most this many rounds (each of one schedule).
    limit: int = 100


class WorkerStore(Protocol):
    """What the worker's parts (worker/) write and read: the claim, leases, outcomes.
    Every method is one transaction (or one atomic statement); every write that
    changes a job returns the job as it now is, so callers can publish the change.
    Driver errors surface as StorageUnavailableError."""

    async def claim(self, params: ClaimParams) -> list[Claim]:
        """Atomically take up to `limit` due jobs, none of a type in `skip_types` (paused
        types, domain/dispatch.py) and, with `only_type`, only of that type (a probe).
        With `max_per_caller` (fair share), no caller (requested_by) gets more than that
        many PROCESSING: each caller's oldest due jobs, up to what it may still start:
        PENDING with next_attempt_at unset or past, and PROCESSING whose lease expired
        (re-claim: that lost attempt is closed with LEASE_EXPIRED). Each becomes
        PROCESSING with a fresh claim token, lease_expires_at = now + lease,
        attempt_count + 1, started_at = now and a new open attempt record. Expired
        jobs that already used max_attempts become FAILED (error_code LEASE_EXPIRED)
        instead and are not returned; call `fail_exhausted_leases` for that. Oldest
        due first. SKIP LOCKED on PostgreSQL."""
        ...

    async def claim_limited(self, params: LimitedClaimParams) -> LimitedClaim:
        """Claim (as `claim` with only_type) up to `limit` due jobs of `job_type`, no
        more than its limits allow across every instance on the database
        (domain/claim_limits.py): a whole token each from the type's shared bucket (with
        `type_limit.per_second`; tokens not used stay), and no more than
        `type_limit.max_running` PROCESSING at once. Instances claiming the same type
        take turns. Says how long until a limit that held the claim back may allow more.
        `max_per_caller`: fair share, as in `claim`."""
        ...

    async def fail_exhausted_leases(self) -> list[Job]:
        """PROCESSING jobs whose lease expired and whose attempts are used up become
        FAILED with error_code LEASE_EXPIRED. Returns them."""
        ...

    async def renew_leases(self, params: RenewLeasesParams) -> set[str]:
        """Push forward the leases of jobs we own, for many (job id, claim token)
        pairs in one statement: the lease of each job the token still owns becomes
        now + lease. Returns the ids of those jobs; the others are no longer ours."""
        ...

    async def complete(self, params: CompleteParams) -> Job:
        """PROCESSING -> COMPLETED with the result, if `token` still owns the job;
        else LeaseLostError. Closes the open attempt record, with `usage` in it.
        `claimed`: the job as `token` claimed it (the worker's); the columns no write
        after ENQUEUE changes (its input above all) are then taken from it, not read
        back (storage/outcome_rows.py). The job returned is whole either way."""
        ...

    async def fail(self, params: FailParams) -> Job:
        """Record a failed attempt if `token` still owns the job (else LeaseLostError).
        With `retry_at`: back to PENDING with next_attempt_at = retry_at. Without:
        FAILED with failed_at = now. error_message/code/reason are stored as given
        (already truncated by the caller); `failure.usage` goes into the attempt.
        `claimed`: as in `complete`."""
        ...

    async def end_unsettled(self, params: FailParams) -> list[Job]:
        """The last resort after an attempt's outcome could not be written: FAILED
        with `params.failure` (`retry_at` is not read), its waiting dependents, and
        theirs, CANCELLED naming the job each waited for, without the recursion of
        the dependents' trigger (a chain of any depth ends). The job first, then the
        dependents it ended; LeaseLostError if `token` no longer owns it."""
        ...

    async def release(self, params: ReleaseParams) -> Job | None:
        """Give a claimed job back as PENDING without charging the attempt (clean
        shutdown): attempt_count - 1 and the open attempt record dropped. None if
        the token no longer owns it."""
        ...

    async def next_due_at(self) -> datetime | None:
        """The earliest time a PENDING job becomes due or a lease expires (for the
        worker's sleep); None if nothing waits."""
        ...


class PauseStore(Protocol):
    """Dispatch pauses (domain/dispatch.py): one row per paused job type, shared by every
    instance on the database (the dispatch breaker's, and what the pages show)."""

    async def dispatch_pauses(self) -> list[DispatchPause]:
        """Every paused job type (cheap: every instance reads it about once a second)."""
        ...

    async def open_pause(self, params: OpenPauseParams) -> DispatchPause:
        """Pause `job_type` (upsert): reason, until, last_error and opened_by are
        replaced; `since` is kept when the type is already paused, else it is now.
        Returns the row as it now is."""
        ...

    async def close_pause(self, job_type: JobType) -> bool:
        """Resume `job_type`; True if a pause was removed."""
        ...

    async def take_probe(self, params: TakeProbeParams) -> bool:
        """Compare-and-set: if the pause's `until` is past (<= now), move it to
        `next_probe_at` and return True (this caller sends the probe); else False.
        Of several instances racing, exactly one wins."""
        ...


class RetentionStore(Protocol):
    """Retention (san_jobs/job_service/pruner.py, domain/retention.py): terminal jobs
    counted and deleted past their cutoff, one pruner at a time across instances."""

    async def count_prunable(self, params: CountPrunableParams) -> dict[JobStatus, int]:
        """For each (terminal) status in `cutoffs`: how many jobs of it ended (updated_at)
        before its cutoff, counting at most `limit` (an index range count that stops
        there, so it stays cheap on a big table). One read."""
        ...

    async def prune_batch(self, params: PruneBatchParams) -> int:
        """Delete at most `limit` jobs of terminal `status` that ended before `cutoff`,
        oldest first, in one short transaction (one statement; rows another
        transaction holds are skipped on PostgreSQL). The DELETE itself re-checks the
        status and the age, so a job that is not terminal is never deleted. Returns how
        many were deleted; fewer than `limit` means none is left (or the rest is held
        by a concurrent prune)."""
        ...

    def prune_lock(self) -> AbstractAsyncContextManager[bool]:
        """Enter to take the pruners' lock, shared by every instance on the database,
        without waiting: yields True when this caller holds it until exit, False when
        another holds it (PostgreSQL: a session advisory lock on a connection kept for
        the run; SQLite, one instance by design, and memory: a flag on the store)."""
        ...


class JobCommands(Protocol):
    """What callers ask of jobs: Enqueue (one, or BatchEnqueue's many), CancelJob and
    RetryFailed. Every method is one transaction (or one atomic statement) and returns
    the jobs as they now are, so callers can publish the change. Driver errors
    surface as StorageUnavailableError."""

    async def enqueue(self, params: EnqueueParams) -> tuple[Job, bool]:
        """Insert a PENDING job and commit. Returns (job, deduplicated).

        The keys are `new.tenant`'s alone: a `request_id` the tenant used returns its
        job (deduplicated=True); an active job of the tenant for (job_type,
        target_id), detected by the partial unique index, raises DuplicateJobError, or
        with RETURN_EXISTING returns that job. Another tenant's jobs are never found,
        named or returned."""
        ...

    async def enqueue_many(self, items: Sequence[EnqueueParams]) -> list[EnqueueOutcome]:
        """Each item as `enqueue` would store it, in order: one outcome per item, and
        an item's own error as its outcome (never raised). Items are resolved in
        order, so a later item deduplicates to an earlier one of the same call (same
        tenant and request_id, or same tenant and active (job_type, target_id)).
        Storage trouble for the whole call (StorageUnavailableError) is raised: some
        items may then be stored, which their request_id makes safe to send again."""
        ...

    async def cancel(self, params: CancelParams) -> Job:
        """PENDING or PROCESSING -> CANCELLED (claim token cleared, so the worker's
        late write is refused). JobNotFoundError, or InvalidJobStateError if terminal.
        With `owner`, only a job whose requested_by is `owner` moves; any other is
        JobNotFoundError, as if it did not exist."""
        ...

    async def retry_failed(self, params: RetryFailedParams) -> RetryOutcome:
        """Move FAILED jobs matching the filter (at most `limit`, oldest failure first)
        back to PENDING, due now: attempt_count and the attempt history are kept,
        max_attempts becomes attempt_count + extra_attempts (a fresh round), the
        error fields stay until the next outcome, failed_at is cleared. Each job
        moves at most once however many calls race. A job whose (job_type,
        target_id) already has an active job of the same tenant is skipped with a
        reason."""
        ...


class JobQueries(Protocol):
    """What callers read about jobs (the application's reads, the pages, the metrics):
    one job, many, a page, the stats and their counts, usage, failure groups. Driver
    errors surface as StorageUnavailableError."""

    async def get(self, job_id: str) -> Job:
        """One job, or JobNotFoundError."""
        ...

    async def get_many(self, job_ids: Sequence[str]) -> list[Job]:
        """The jobs that exist among `job_ids` (unknown ids are left out)."""
        ...

    async def pending_count(self, params: PendingCountParams) -> int:
        """How many PENDING jobs (ready, delayed or waiting for dependencies) `tenant`
        has, counted up to `at_most` (a bigger count reads as `at_most`)."""
        ...

    async def with_waiting_on(self, jobs: Sequence[Job]) -> list[Job]:
        """`jobs`, those waiting for dependencies with Job.waiting_on filled in."""
        ...

    async def dependents_moved_by(self, job_ids: Sequence[str]) -> list[str]:
        """The ids of the jobs that depend on any of `job_ids` and that the end of
        these moved (due now, or CANCELLED), in the statement that ended them."""
        ...

    async def list_jobs(self, params: ListJobsParams) -> tuple[list[Job], str | None]:
        """A page of jobs, newest first (created_at DESC, id DESC), keyset-paged.
        Returns (jobs, next_page_token or None on the last page). A malformed
        token raises InvalidRequestError on field `page_token`."""
        ...

    async def stats(self) -> JobStats:
        """Counts by (job_type, status), the created_at of the oldest PENDING job and
        each type's oldest due time. One cheap read whatever the table's size (the SQL
        store reads counts kept by triggers: storage/counts.py)."""
        ...

    async def fold_counts(self) -> int:
        """Fold the counts' pending deltas into their totals (a short write; the SQL
        store on PostgreSQL, every few seconds: san_jobs/job_service/count_folding.py). Returns
        how many deltas were folded; 0 where there is nothing to fold."""
        ...

    async def usage_totals(self, params: UsageTotalsParams) -> tuple[list[UsageTotal], bool]:
        """Usage summed per (job type, model, caller) over the attempts `query`
        selects, ordered by those three (domain.usage.group_key): at most `max_groups`
        groups, and whether more were left out."""
        ...

    async def failure_groups(self, params: FailureGroupsParams) -> tuple[list[FailureGroup], bool]:
        """The FAILED jobs `query` selects, counted per (error_code, error_reason,
        message prefix), in domain.failure_groups.group_order: at most `max_groups`
        groups, and whether more were left out. One read."""
        ...


class JobStore(Protocol):
    """Everything the service does to `async_jobs`, one port per consumer: each a
    field, each implemented once in SQL and once in memory (storage/)."""

    @property
    def worker(self) -> WorkerStore:
        """The worker's port (claim, leases, outcomes)."""
        ...

    @property
    def commands(self) -> JobCommands:
        """Enqueue, cancel, RetryFailed."""
        ...

    @property
    def queries(self) -> JobQueries:
        """The reads."""
        ...

    @property
    def pauses(self) -> PauseStore:
        """The dispatch pauses."""
        ...

    @property
    def retention(self) -> RetentionStore:
        """The pruner's port."""
        ...

    @property
    def schedules(self) -> ScheduleStore:
        """Schedules and the firing of their periods."""
        ...

    @property
    def changes(self) -> ChangeStore:
        """The change feed."""
        ...

    async def ping(self) -> None:
        """Return once the database answers a trivial query; StorageUnavailableError
        when it cannot be reached (health checks, san_jobs/job_service/db_health.py). Callers
        bound its time (asyncio.timeout): a database that hangs never answers. Uses
        a connection of its own, so pools busy with jobs do not make a reachable
        database look down."""
        ...

    async def close(self) -> None:
        """Dispose of the engine."""
        ...


class ChangeStore(Protocol):
    """The change feed (job_changes, written by the database's trigger at every change,
    migration 0013; on the memory store, at the write: storage/memory_changes.py)."""

    async def sequence_changes(self, limit: int) -> FeedState:
        """Give the next positions to at most `limit` committed changes that have
        none yet, in the order they were written, in one transaction holding the
        feed's counter (PostgreSQL; on SQLite the trigger gave them), and return the
        feed's state after it. Positions visible to a reader never have a gap."""
        ...

    async def read_changes(self, params: ReadChangesParams) -> tuple[list[JobChange], FeedState]:
        """The positioned changes after `after_pos` up to `through_pos` that match
        the filter, by position, at most `limit`; and the feed's state read after
        them (so a reader sees whether retention deleted some of them meanwhile)."""
        ...

    async def is_own_change(self, pos: int, requested_by: str) -> bool:
        """Whether the change at `pos` (still kept) is of a job `requested_by` asked for."""
        ...

    async def prune_changes(self, params: PruneChangesParams) -> int:
        """Delete, oldest position first and only as a prefix, at most `limit`
        changes made before `cutoff`, moving the feed's pruned_through with them in
        one transaction; how many were deleted."""
        ...


# Called with a job and what is wrong when its call has not reached the gateway for a
# few seconds (gateway_client.UNREACHABLE_AFTER); the call goes on waiting.
UnreachableHook = Callable[[Job, str], Awaitable[None]]


@runtime_checkable
class WatchesConnection(Protocol):
    """A gateway whose calls wait for a connection and say so while they do (both
    of ours): the worker's executor sets the hook (its dispatch breaker pauses the
    job's type)."""

    on_unreachable: UnreachableHook | None
    # How long a call waits for a connection before it tells `on_unreachable`.
    unreachable_after: float


class AiGateway(Protocol):
    """The model-side port: run one job's AI work."""

    async def run(self, job: Job, deadline: float) -> GatewayAnswer:
        """Do the job's work within `deadline` seconds and return its result as a JSON
        object keyed by the job type's result message field names, with the call's
        usage as the gateway reported it. Failures raise
        `san_jobs.job_service.domain.failures.GatewayCallError`."""
        ...


class ScheduleStore(Protocol):
    """Schedules (domain/schedules.py): the rows, and the firing of due periods. Both
    stores implement it (storage/schedules.py, storage/memory_schedules.py).

    A schedule is keyed by (tenant, schedule_id). Every period is fired by one
    round only, whichever store (instance) claims it: the round moves next_fire_at
    on and enqueues the period's job (request_id `schedule:<id>:<period start>`)
    in one transaction."""

    async def create_schedule(self, params: CreateScheduleParams) -> tuple[Schedule, bool]:
        """Store `schedule`: (the schedule, True when created). The same key with an
        equal definition returns the stored one (False); another definition raises
        ScheduleExistsError. A new schedule of a tenant that has `max_per_tenant`
        already (None: no cap) raises ScheduleQuotaError, racing creates included."""
        ...

    async def find_schedules(self, params: FindSchedulesParams) -> list[Schedule]:
        """The schedules of that id: the tenant's (at most one), or every tenant's."""
        ...

    async def list_schedules(
        self, params: ListSchedulesParams
    ) -> tuple[list[Schedule], tuple[str, str] | None]:
        """A page by (schedule_id, tenant) after `after` (None: the first), of one
        tenant or all; and the key to pass as `after` for the next (None: the last)."""
        ...

    async def delete_schedule(self, key: ScheduleKey) -> bool:
        """Remove it (its jobs stay); False when there was none."""
        ...

    async def pause_schedule(self, key: ScheduleKey) -> Schedule | None:
        """Paused (a no-op when it is); None when there is none."""
        ...

    async def resume_schedule(self, key: ScheduleKey) -> Schedule | None:
        """Running from its next period; the periods that started while paused (or
        held: its owner token revoked or expired, Schedule.owner_hold) are counted
        in skipped_count, and a held one is taken over by its tenant's live token.
        A no-op when running; None when there is none."""
        ...

    async def next_schedule_fire_at(self) -> datetime | None:
        """The earliest next_fire_at of a running schedule whose period does not
        wait for its previous job."""
        ...

    async def fire_due_schedules(self, params: FireDueParams) -> list[FireOutcome]:
        """One round of each due running schedule whose owner token, if it has one,
        is live (not revoked, not expired) (at most `limit`, at most
        PER_OWNER_IN_ROUND of one owner, every owner's first before anyone's
        second; a period waiting for its previous job is not due, but looked at
        every WAITING_RECHECK): the rounds this store won, each committed."""
        ...
