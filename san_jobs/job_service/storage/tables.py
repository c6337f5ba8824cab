"""The `async_jobs` table, declared once; the migrations must build exactly this.

Plain words for `status` (a CHECK keeps it honest) and `job_type` (a registry name,
checked at the API), so an operator's SQL reads as written. `target_id` is a soft
reference: no foreign key.

`due_at` is internal (not part of the domain `Job`): the time from which an active row
is claimable. PENDING: next_attempt_at while a retry waits (or a delayed job's
schedule time, which Enqueue writes there while it is ahead), else updated_at (enqueued,
given back, retried); PROCESSING: lease_expires_at; NULL otherwise. Every write derives
it (domain.transitions.due_at) and the CHECK ck_async_jobs_due_at holds it. One partial
index on it serves the claim query (new jobs, retries and expired leases in one ordered
range scan) and `next_due_at`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Dialect,
    Float,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    String,
    Table,
    Text,
    false,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import TypeDecorator

from san_jobs.job_service.domain.model import JobStatus
from san_jobs.job_service.domain.transitions import DUE_AT_CHECK_SQL

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every database.

    PostgreSQL stores `timestamptz`. SQLite has no time zones: values are stored as
    naive UTC text (fixed width, so text order is time order) and given back tz-aware."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime given to the database: {value!r}")
        value = value.astimezone(UTC)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if not isinstance(value, datetime):  # pragma: no cover - driver gave text
            value = datetime.fromisoformat(str(value))
        moment: datetime = value
        if moment.tzinfo is None:
            return moment.replace(tzinfo=UTC)
        return moment.astimezone(UTC)


# JSON on SQLite (text), JSONB on PostgreSQL.
JsonType = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")

ACTIVE_SQL = "status IN ('PENDING', 'PROCESSING')"
HAS_REQUEST_ID_SQL = "request_id IS NOT NULL"
IS_FAILED_SQL = "status = 'FAILED'"
TERMINAL_SQL = "status IN ('COMPLETED', 'FAILED', 'CANCELLED')"
IS_PENDING_SQL = "status = 'PENDING'"


def _words(values: list[str]) -> str:
    return ", ".join(f"'{v}'" for v in values)


async_jobs = Table(
    "async_jobs",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("job_type", String(32), nullable=False),
    Column("status", String(16), nullable=False),
    Column("target_id", String(256), nullable=False),
    Column("request_params", JsonType, nullable=False),
    Column("requested_by", String(256), nullable=False, server_default=""),
    Column("request_id", String(256), nullable=True),
    Column("result", JsonType, nullable=True),
    Column("error_message", Text, nullable=True),
    Column("error_code", String(64), nullable=True),
    Column("error_reason", String(128), nullable=True),
    Column("attempt_count", Integer, nullable=False, server_default="0"),
    Column("max_attempts", Integer, nullable=False),
    # Closed and open attempt records, oldest first (JobAttempt.to_json() dicts).
    Column("attempts", JsonType, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    Column("started_at", UtcDateTime, nullable=True),
    Column("completed_at", UtcDateTime, nullable=True),
    Column("failed_at", UtcDateTime, nullable=True),
    Column("cancelled_at", UtcDateTime, nullable=True),
    Column("cancel_reason", Text, nullable=True),
    Column("next_attempt_at", UtcDateTime, nullable=True),
    Column("lease_expires_at", UtcDateTime, nullable=True),
    Column("claim_token", String(64), nullable=True),
    Column("due_at", UtcDateTime, nullable=True),
    # The W3C traceparent of the Enqueue call (NULL: untraced), the parent of each
    # attempt's span (migration 0008; 55 characters is version 00's exact length).
    Column("traceparent", String(55), nullable=True),
    # The namespace of the keys (migration 0011): request_id and the active
    # (job_type, target_id) are unique per tenant. Under --auth token the caller's
    # token name, under --auth off "" (NewJob.tenant). Nullable only for code older
    # than 0011, which does not write it: a trigger then fills it in (see 0011).
    Column("tenant", String(256), nullable=True),
    # A delayed job's EnqueueRequest.schedule_time, as given (migration 0014); NULL
    # without one. Shown, never read by the claim: while the time is ahead the job's
    # next_attempt_at holds it, and due_at follows (see the module docstring).
    Column("scheduled_at", UtcDateTime, nullable=True),
    # EnqueueRequest.priority, 1 (most urgent) to 5 (migration 0015); 3 by default,
    # also for rows older code writes.
    Column("priority", SmallInteger, nullable=False, server_default=text("3")),
    # Dependencies (migration 0017, domain/dependencies.py): the ids given as
    # EnqueueRequest.depends_on (a JSON list; NULL without), how many of them are not
    # COMPLETED yet while the job waits, whether some job depends on this one (the
    # trigger fires only then), and when the dependencies' results were merged into
    # request_params (its first claim).
    Column("depends_on", JsonType, nullable=True),
    Column("dependencies_left", Integer, nullable=True),
    Column("has_dependents", Boolean, nullable=False, server_default=false()),
    Column("inputs_merged_at", UtcDateTime, nullable=True),
    # How deep the job is in its chain of dependencies (migration 0018; NULL: 0, no
    # dependencies or enqueued before 0018): the Enqueue of a dependent reads it to
    # bound chains (domain/dependencies.py, MAX_DEPENDENCY_DEPTH).
    Column("dependency_depth", SmallInteger, nullable=True),
    CheckConstraint(f"status IN ({_words([s.value for s in JobStatus])})", name="status"),
    # No CHECK on job_type: the types live in the registry (domain/job_types.py), the
    # API accepts only registered names, and a new type needs no migration (0004).
    CheckConstraint("attempt_count >= 0", name="attempt_count"),
    CheckConstraint("max_attempts >= 1", name="max_attempts"),
    # A claim token exists exactly while a worker holds the job: outcome writes find
    # their job by token alone.
    CheckConstraint("(status = 'PROCESSING') = (claim_token IS NOT NULL)", name="claimed"),
    # due_at is what transitions.due_at() derives from the status (migration 0005).
    CheckConstraint(DUE_AT_CHECK_SQL, name="due_at"),
    # At most one PENDING or PROCESSING job per (job_type, target_id) of a tenant:
    # duplicates are stopped here, not by a read-then-write. job_type leads (a type's
    # running jobs are a range of it), tenant last (a target's active jobs, of every
    # tenant, are a range too: RetryFailed, an operator's SQL).
    Index(
        "uq_async_jobs_tenant_active_target",
        "job_type",
        "target_id",
        "tenant",
        unique=True,
        sqlite_where=text(ACTIVE_SQL),
        postgresql_where=text(ACTIVE_SQL),
    ),
    # The idempotency key, per tenant: most jobs have none, and only keys are indexed.
    # request_id leads, so a lookup by the key alone is a range of it too.
    Index(
        "uq_async_jobs_tenant_request_id",
        "request_id",
        "tenant",
        unique=True,
        sqlite_where=text(HAS_REQUEST_ID_SQL),
        postgresql_where=text(HAS_REQUEST_ID_SQL),
    ),
    # The claim query and next_due_at: ORDER BY due_at over active rows.
    Index(
        "ix_async_jobs_due",
        "due_at",
        sqlite_where=text(ACTIVE_SQL),
        postgresql_where=text(ACTIVE_SQL),
    ),
    # The claim by priority (migration 0015): ORDER BY priority, due_at over active
    # rows (domain/priorities.py; the claims by age keep ix_async_jobs_due).
    Index(
        "ix_async_jobs_due_priority",
        "priority",
        "due_at",
        sqlite_where=text(ACTIVE_SQL),
        postgresql_where=text(ACTIVE_SQL),
    ),
    # Operators: failures by time (RetryFailed, "what failed since ...", only FAILED
    # rows), listing newest first, everything about one target.
    Index(
        "ix_async_jobs_failed_at",
        "failed_at",
        sqlite_where=text(IS_FAILED_SQL),
        postgresql_where=text(IS_FAILED_SQL),
    ),
    Index("ix_async_jobs_created_at_id", "created_at", "id"),
    Index("ix_async_jobs_target_id", "target_id"),
    # The pruner (storage/prune.py, migration 0010): terminal jobs of one status by
    # end time (updated_at), so a batch or a count is a range scan that stops at its
    # LIMIT; active rows are not in it.
    Index(
        "ix_async_jobs_terminal_end",
        "status",
        "updated_at",
        sqlite_where=text(TERMINAL_SQL),
        postgresql_where=text(TERMINAL_SQL),
    ),
    # Big tables (migration 0009): each serves one operator query by an index range
    # instead of a scan of every finished job. RetryFailed and ListJobs "FAILED of
    # these types in this time range"; stats' oldest PENDING job, and the oldest due
    # PENDING job of each type (one index probe per type). The PENDING ones hold only
    # the queue, so they stay small however many jobs have finished.
    Index(
        "ix_async_jobs_failed_type_at",
        "job_type",
        "failed_at",
        sqlite_where=text(IS_FAILED_SQL),
        postgresql_where=text(IS_FAILED_SQL),
    ),
    Index(
        "ix_async_jobs_pending_created_at",
        "created_at",
        sqlite_where=text(IS_PENDING_SQL),
        postgresql_where=text(IS_PENDING_SQL),
    ),
    Index(
        "ix_async_jobs_pending_type_due",
        "job_type",
        "due_at",
        sqlite_where=text(IS_PENDING_SQL),
        postgresql_where=text(IS_PENDING_SQL),
    ),
)


# Who waits for whom (migration 0017): a row per (dependent, dependency), `position`
# its place in depends_on. The trigger of 0017 finds a job's dependents by
# depends_on_id; a dependent's rows are deleted with it by another trigger. No
# foreign keys: an operator's TRUNCATE async_jobs keeps working, and a dependency is
# pruned once nothing active waits for it.
job_dependencies = Table(
    "job_dependencies",
    metadata,
    Column("job_id", String(36), nullable=False),
    Column("depends_on_id", String(36), nullable=False),
    Column("position", SmallInteger, nullable=False),
    PrimaryKeyConstraint("job_id", "depends_on_id", name="pk_job_dependencies"),
    Index("ix_job_dependencies_depends_on_id", "depends_on_id"),
)


# Who may call JobService under --auth token (san_jobs/job_service/auth). Only the SHA-256 of
# a token is kept; the name is the caller's identity (a job's requested_by). A name
# holds at most one live token at a time, so a revoked name can be given a new token
# (rotation) without two live credentials meaning the same caller.
TOKEN_ROLES = ("submitter", "viewer", "operator")
LIVE_TOKEN_SQL = "revoked_at IS NULL"

api_tokens = Table(
    "api_tokens",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("name", String(128), nullable=False),
    Column("role", String(16), nullable=False),
    Column("token_hash", String(64), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("revoked_at", UtcDateTime, nullable=True),
    # Migration 0012: when the token stops working by itself; NULL: never.
    Column("expires_at", UtcDateTime, nullable=True),
    CheckConstraint(f"role IN ({_words(list(TOKEN_ROLES))})", name="role"),
    Index("uq_api_tokens_token_hash", "token_hash", unique=True),
    Index(
        "uq_api_tokens_live_name",
        "name",
        unique=True,
        sqlite_where=text(LIVE_TOKEN_SQL),
        postgresql_where=text(LIVE_TOKEN_SQL),
    ),
)


# Job types whose dispatch is paused (circuit open, rate-limited): one row per type,
# shared by every instance on the database (domain/dispatch.py, migration 0006).
PAUSE_REASONS = ("CIRCUIT_OPEN", "RATE_LIMITED")

dispatch_pauses = Table(
    "dispatch_pauses",
    metadata,
    Column("job_type", String(32), primary_key=True),
    Column("reason", String(32), nullable=False),
    Column("since", UtcDateTime, nullable=False),
    Column("until", UtcDateTime, nullable=False),
    Column("last_error", Text, nullable=False),
    Column("opened_by", String(200), nullable=False),
    CheckConstraint(f"reason IN ({_words(list(PAUSE_REASONS))})", name="reason"),
)


# The shared token bucket of each rate-limited job type (domain/claim_limits.py,
# migration 0007): `tokens` at `refilled_at`; the row is locked while a claim of its
# type runs, so instances claiming one limited type take turns.
dispatch_limits = Table(
    "dispatch_limits",
    metadata,
    Column("job_type", String(32), primary_key=True),
    Column("tokens", Float, nullable=False),
    Column("refilled_at", UtcDateTime, nullable=False),
)


# Jobs by (job_type, status), kept by the database itself (migration 0009, storage/
# counts.py): triggers on async_jobs count every insert, status change and delete,
# whichever code path makes it (transitions, RetryFailed, cancel, the pruner, an
# operator's SQL), so GetJobStats reads a few rows instead of counting the table.
# PostgreSQL: the triggers append +1/-1 rows to async_job_count_deltas (no row that
# concurrent writers would queue on) and fold_counts() moves them into
# async_job_counts now and then; SQLite (one writer at a time) updates
# async_job_counts directly. The counts are the sum of both tables.
async_job_counts = Table(
    "async_job_counts",
    metadata,
    Column("job_type", String(32), primary_key=True),
    Column("status", String(16), primary_key=True),
    Column("n", BigInteger, nullable=False),
)

# Append-only, no index: an insert is one heap tuple; fold_counts() deletes them all.
async_job_count_deltas = Table(
    "async_job_count_deltas",
    metadata,
    Column("job_type", String(32), nullable=False),
    Column("status", String(16), nullable=False),
    Column("delta", Integer, nullable=False),
)


# One row, kept by the migration runner (storage/schema_version.py), not by a
# migration: the database's revision and the oldest revision whose code may run on it,
# so that code older than the schema (which does not know the revision) can read from
# the database itself whether it may start.
schema_compatibility = Table(
    "schema_compatibility",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("revision", String(32), nullable=False),
    Column("compatible_from", String(32), nullable=False),
    CheckConstraint("id = 1", name="one_row"),
)


# The change feed (StreamJobChanges, migration 0013, storage/changes.py): a trigger on
# async_jobs writes a snapshot of the job (no input, no lease) at every move into an
# end status and at RetryFailed's FAILED -> PENDING. `pos` is the change's place in
# the feed: given by the trigger on SQLite (one writer), and on PostgreSQL by the
# sequencer to committed rows only, so what a reader sees is a gap-free prefix.
POSITIONED_SQL = "pos IS NOT NULL"
UNPOSITIONED_SQL = "pos IS NULL"

job_changes = Table(
    "job_changes",
    metadata,
    Column(
        "id", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("pos", BigInteger, nullable=True),
    Column("changed_at", UtcDateTime, nullable=False),
    Column("job_id", String(36), nullable=False),
    Column("job_type", String(32), nullable=False),
    Column("status", String(16), nullable=False),
    Column("target_id", String(256), nullable=False),
    Column("requested_by", String(256), nullable=False),
    Column("request_id", String(256), nullable=True),
    Column("result", JsonType, nullable=True),
    Column("error_message", Text, nullable=True),
    Column("error_code", String(64), nullable=True),
    Column("error_reason", String(128), nullable=True),
    Column("attempt_count", Integer, nullable=False),
    Column("max_attempts", Integer, nullable=False),
    Column("attempts", JsonType, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    Column("started_at", UtcDateTime, nullable=True),
    Column("completed_at", UtcDateTime, nullable=True),
    Column("failed_at", UtcDateTime, nullable=True),
    Column("cancelled_at", UtcDateTime, nullable=True),
    Column("cancel_reason", Text, nullable=True),
    Column("next_attempt_at", UtcDateTime, nullable=True),
    Column("traceparent", String(55), nullable=True),
    Column("tenant", String(256), nullable=True),
    # Migration 0014: the job's scheduled_at, as it was (the trigger copies it).
    Column("scheduled_at", UtcDateTime, nullable=True),
    # Migration 0015: its priority (the trigger copies it).
    Column("priority", SmallInteger, nullable=False, server_default=text("3")),
    Index(
        "uq_job_changes_pos",
        "pos",
        unique=True,
        sqlite_where=text(POSITIONED_SQL),
        postgresql_where=text(POSITIONED_SQL),
    ),
    # The sequencer's work list on PostgreSQL (always empty on SQLite, whose rows are
    # born positioned).
    Index(
        "ix_job_changes_unpositioned",
        "id",
        sqlite_where=text(UNPOSITIONED_SQL),
        postgresql_where=text(UNPOSITIONED_SQL),
    ),
)

job_change_feed = Table(
    "job_change_feed",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("feed_id", String(32), nullable=False),
    Column("last_pos", BigInteger, nullable=False),
    Column("pruned_through", BigInteger, nullable=False),
    # Migration 0020: the key (hex) that seals a submitter's cursors (domain/changes.py).
    Column("cursor_key", String(128), nullable=True),
    CheckConstraint("id = 1", name="one_row"),
)


# Schedules (migration 0016, storage/schedules.py, domain/schedules.py): one row per
# (tenant, schedule_id). `next_fire_at` is the start of the next period to fire; the
# instance whose conditional UPDATE moves it on fires that period (so one does).
# `definition` holds the template as Enqueue validated it and the period's rule.
job_schedules = Table(
    "job_schedules",
    metadata,
    Column("tenant", String(256), primary_key=True),
    Column("schedule_id", String(128), primary_key=True),
    Column("requested_by", String(256), nullable=False),
    Column("definition", JsonType, nullable=False),
    Column("paused", Boolean, nullable=False),
    Column("next_fire_at", UtcDateTime, nullable=False),
    Column("last_fire_at", UtcDateTime, nullable=True),
    Column("last_job_id", String(36), nullable=True),
    Column("skipped_count", BigInteger, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    # Migration 0019: the api_tokens.id that owns it (fires only while that token is
    # live); NULL: no token does (storage/schedules.py).
    Column("owner_token_id", String(36), nullable=True),
    # The firing loop's question, every second on every instance: the earliest due.
    Index("ix_job_schedules_next_fire_at", "next_fire_at"),
    # ListSchedules for every caller (an operator's), by schedule_id.
    Index("ix_job_schedules_schedule_id", "schedule_id"),
)
