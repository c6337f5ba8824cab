"""The SQL of the job-state writes and key lookups, built once per store.

Building a SQLAlchemy statement costs more than running it on a fast database, so the
statements the worker and Enqueue run thousands of times a second are made here once
(per dialect and instance id) and executed with a parameter dict. Parameter names all
start with `p_` (column names are reserved in SET clauses).

What each write does (its WHERE, SET, attempt edit and notification) comes from its
declaration in domain/transitions.py, compiled by transition_sql.py; this module only
gives each statement its shape: one job or a JSON batch of rows, the claim's ordered
selection of due rows, the INSERT's conflict rule. Reads and operator queries are in
queries.py.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Float, Integer, any_, bindparam, delete, func, select, text, true, update
from sqlalchemy.dialects import postgresql, sqlite

from san_jobs.job_service.domain.model import JobStatus
from san_jobs.job_service.domain.transitions import (
    CANCEL,
    CLAIM,
    COMPLETE,
    ENQUEUE,
    FAIL_AND_RETRY,
    FAIL_FINAL,
    LEASE_EXHAUSTED,
    RELEASE,
    RENEW_LEASE,
    RETRY_FAILED,
)
from san_jobs.job_service.storage.json_sql import array_of, p_str, p_time
from san_jobs.job_service.storage.outcome_rows import OUTCOME_COLUMNS
from san_jobs.job_service.storage.tables import (
    ACTIVE_SQL,
    async_jobs,
    dispatch_limits,
    dispatch_pauses,
)
from san_jobs.job_service.storage.transition_sql import Params, Rows, TransitionSql

t = async_jobs

# The partial indexes' predicate, as literal SQL (not bound parameters) so the
# planners can match them.
ACTIVE = text(ACTIVE_SQL)

# The session of the connections that run the hot statements on PostgreSQL. Each
# touches a handful of rows, found by key or by the due index. But a queue table
# changes faster than ANALYZE runs, so the planner's estimates are usually stale
# (a fresh table: ~10 rows of thousands), and it then "saves" on tiny scans that
# are not tiny: reading every due row by bitmap and sorting them for each claim, or
# a sequential scan of the whole table to find 10 ids (both seen, at 1-3 ms a
# statement, with auto_explain). Without bitmap and sequential scans the planner
# can only take the indexes these statements were written for. (A connection goes
# back to the pool reset.)
HOT_SESSION = ("SET enable_bitmapscan = off", "SET enable_seqscan = off")
HOT_SESSION_RESET = ("RESET enable_bitmapscan", "RESET enable_seqscan")

# Rows a claim takes at most.
P_LIMIT = "p_limit"
# Fair share (--max-running-per-caller): jobs of one caller (requested_by) running at most.
P_MAX_PER_CALLER = "p_max_per_caller"


class Statements:
    """Prebuilt statements for one dialect; writes return every column (`RETURNING *`;
    the outcome writes all but those the claim already gave) and, on PostgreSQL, send
    their change notification within the same statement."""

    def __init__(self, postgres: bool, instance_id: str) -> None:
        self.pg = postgres
        self.instance_id = instance_id
        self.transitions = sql = TransitionSql(postgres, instance_id)

        # -- enqueue -------------------------------------------------------------------
        insert = postgresql.insert(t) if postgres else sqlite.insert(t)
        self.enqueue_params: Params = sql.params(ENQUEUE)
        self.enqueue = sql.finish(
            insert.values(sql.insert_values(ENQUEUE, self.enqueue_params))
            # Both unique indexes (a tenant's active target, its request_id), no error,
            # no abort. No conflict target: any unique index refuses the row, so code
            # of before 0011 (whose indexes were others) writes the same way.
            .on_conflict_do_nothing(),
            ENQUEUE,
        )
        # Group commit: every row of the batch in one INSERT; rows refused by a unique
        # index (including a row of the same batch) are left out of RETURNING. Rows go
        # in array order, so the earlier caller wins a conflict inside the batch. Only
        # the ids come back: the new rows are exactly what was sent (see job_commands.py).
        self.enqueue_rows: Rows = sql.rows([ENQUEUE], per_row_time=False)
        columns = sql.insert_values(ENQUEUE, self.enqueue_rows)
        rows = select(*columns.values()).select_from(self.enqueue_rows.table)
        if not postgres:
            rows = rows.where(true())  # SQLite: INSERT ... SELECT before ON CONFLICT needs a WHERE
        self.enqueue_many = sql.finish(
            insert.from_select(list(columns), rows).on_conflict_do_nothing(),
            ENQUEUE,
            (t.c.id, t.c.status),
        )

        # -- jobs by key ---------------------------------------------------------------
        # The keys are a tenant's (tables.py, migration 0011): every lookup by key
        # names the tenant (p_tenant), so another tenant's job is never found, named
        # or returned by one.
        tenant = t.c.tenant == p_str("p_tenant")
        self.by_id = select(t).where(t.c.id == p_str("p_id"))
        self.by_request_id = select(t).where(t.c.request_id == p_str("p_request_id"), tenant)
        self.active_for_target = select(t).where(
            t.c.job_type == p_str("p_job_type"),
            t.c.target_id == p_str("p_target_id"),
            tenant,
            ACTIVE,
        )
        self.by_ids = select(t).where(t.c.id.in_(bindparam("p_ids", expanding=True)))
        # BatchEnqueue's rows the INSERT left out, looked up per chunk rather than one
        # by one (a resent batch of 500 keyed items: 1 SELECT instead of ~1,000).
        self.by_request_ids = select(t).where(
            t.c.request_id.in_(bindparam("p_request_ids", expanding=True)), tenant
        )
        self.active_for_targets = select(t).where(
            t.c.job_type == p_str("p_job_type"),
            t.c.target_id.in_(bindparam("p_target_ids", expanding=True)),
            tenant,
            ACTIVE,
        )

        # -- the worker's writes -----------------------------------------------------
        # Due (CLAIM's sources): one ordered range scan over a partial index, which
        # stops after p_limit rows (on PostgreSQL the claim's connection forbids the
        # bitmap scan a stale estimate would pick, see HOT_SESSION). Two orders
        # (domain/priorities.py, AgeShare says which a claim takes): `claim`, the
        # oldest due first whatever the priority (ix_async_jobs_due), and
        # `claim_urgent`, the most urgent first, oldest due first within a priority
        # (ix_async_jobs_due_priority).
        claim_params = sql.params(CLAIM)
        self.claim = self._claim(claim_params, (t.c.due_at,))
        self.claim_urgent = self._claim(claim_params, (t.c.priority, t.c.due_at))
        self.claim_fair = self._fair_claim(claim_params, urgent=False)
        self.claim_fair_urgent = self._fair_claim(claim_params, urgent=True)

        self.lease_exhausted_params: Params = sql.params(LEASE_EXHAUSTED)
        self.fail_exhausted_leases = sql.update([LEASE_EXHAUSTED], self.lease_exhausted_params)

        # Every lease this instance holds, pushed forward in one statement; only the
        # ids of the jobs still held come back.
        self.renew_rows: Rows = sql.rows([RENEW_LEASE], per_row_time=False)
        self.renew_leases = sql.update([RENEW_LEASE], self.renew_rows, returning=(t.c.id,))

        # Outcomes, one statement per batch of (job id, claim token, ...) rows. Each row
        # still needs its own token: rows that do not match are simply not updated
        # (and not returned), and their callers hear LeaseLostError. Each row carries
        # the time of its own call (`at`), as a single write would have: a retry's
        # delay counts from the failure, not from the batch.
        # They return only what an outcome can change (outcome_rows.py): not the job's
        # input, which the worker holds from its claim.
        self.complete_rows: Rows = sql.rows([COMPLETE], per_row_time=True)
        self.complete_many = sql.update([COMPLETE], self.complete_rows, returning=OUTCOME_COLUMNS)
        # A failed attempt: with `retry_at`, back to PENDING due then; without, FAILED.
        failed = [FAIL_FINAL, FAIL_AND_RETRY]
        self.fail_rows: Rows = sql.rows(failed, per_row_time=True)
        self.fail_many = sql.update(failed, self.fail_rows, returning=OUTCOME_COLUMNS)

        self.release_params: Params = sql.params(RELEASE)
        self.release = sql.update([RELEASE], self.release_params)

        # -- operators -----------------------------------------------------------------
        self.cancel_params: Params = sql.params(CANCEL)
        self.cancel = sql.update([CANCEL], self.cancel_params)
        # A submitter's CancelJob (--auth token): only a job it requested moves.
        self.cancel_owned = sql.update([CANCEL], self.cancel_params, owner=True)
        # FAILED -> PENDING for a list of ids (p_job_ids), those still FAILED.
        self.retry_failed_params: Params = sql.params(RETRY_FAILED, ids=True)
        self.retry_failed = sql.update([RETRY_FAILED], self.retry_failed_params)

        # -- dispatch pauses (domain/dispatch.py) -------------------------------------
        pauses = dispatch_pauses
        self.dispatch_pauses = select(pauses).order_by(pauses.c.job_type)
        # Upsert: a type already paused keeps its `since` (the outage's start).
        opened = (postgresql.insert(pauses) if postgres else sqlite.insert(pauses)).values(
            job_type=p_str("p_job_type"),
            reason=p_str("p_reason"),
            since=p_time("p_now"),
            until=p_time("p_until"),
            last_error=p_str("p_last_error"),
            opened_by=p_str("p_opened_by"),
        )
        self.open_pause = opened.on_conflict_do_update(
            index_elements=[pauses.c.job_type],
            set_={
                "reason": opened.excluded.reason,
                "until": opened.excluded.until,
                "last_error": opened.excluded.last_error,
                "opened_by": opened.excluded.opened_by,
            },
        ).returning(*pauses.c)
        self.close_pause = (
            delete(pauses)
            .where(pauses.c.job_type == p_str("p_job_type"))
            .returning(pauses.c.job_type)
        )
        # -- claim limits (domain/claim_limits.py) -----------------------------------
        # A limited type's bucket row, locked (PostgreSQL) for the claim's transaction:
        # instances claiming the type take turns. Created full on first use.
        buckets = dispatch_limits
        self.bucket = select(buckets.c.tokens, buckets.c.refilled_at).where(
            buckets.c.job_type == p_str("p_job_type")
        )
        if postgres:
            self.bucket = self.bucket.with_for_update()
        self.new_bucket = (
            (postgresql.insert(buckets) if postgres else sqlite.insert(buckets))
            .values(
                job_type=p_str("p_job_type"),
                tokens=bindparam("p_tokens", type_=Float),
                refilled_at=p_time("p_now"),
            )
            .on_conflict_do_nothing()
        )
        self.spend_tokens = (
            update(buckets)
            .where(buckets.c.job_type == p_str("p_job_type"))
            .values(tokens=bindparam("p_tokens", type_=Float), refilled_at=p_time("p_now"))
        )
        # A type's jobs running now: a range of uq_async_jobs_tenant_active_target
        # (job_type leads it; only active rows are in it).
        self.running_of_type = select(func.count()).where(
            t.c.job_type == p_str("p_job_type"),
            t.c.status == JobStatus.PROCESSING.value,
            ACTIVE,
        )

        # Compare-and-set: only the call that finds the probe time passed moves it on.
        self.take_probe = (
            update(pauses)
            .where(pauses.c.job_type == p_str("p_job_type"), pauses.c.until <= p_time("p_now"))
            .values(until=p_time("p_next_probe_at"))
            .returning(pauses.c.job_type)
        )

    def _claim(self, claim_params: Params, order: tuple[Any, ...]) -> Any:
        sql = self.transitions
        due = (
            select(t.c.id)
            .where(*sql.condition(CLAIM, claim_params))
            .order_by(*order)
            .limit(bindparam(P_LIMIT, type_=Integer))
        )
        if self.pg:
            due = due.with_for_update(skip_locked=True)
        # PostgreSQL: `id = ANY(ARRAY(SELECT ...))` makes primary-key lookups for the
        # few ids taken; `id IN (SELECT ...)` may become a hash join over the table.
        due_ids = t.c.id == any_(array_of(due.scalar_subquery())) if self.pg else t.c.id.in_(due)
        return sql.update([CLAIM], claim_params, where=[due_ids])

    def _fair_claim(self, claim_params: Params, *, urgent: bool) -> Any:
        """The claim under fair share (--max-running-per-caller; used only when set): of
        the due rows, each caller's oldest, no more than it may still start (the
        limit minus its running jobs), oldest due first across callers:

            UPDATE ... WHERE id IN (
              SELECT id FROM (SELECT id, due_at, requested_by, row_number() OVER
                                (PARTITION BY requested_by ORDER BY due_at, id) AS rank
                              FROM async_jobs WHERE <due, as CLAIM>) AS ranked
              LEFT JOIN (SELECT requested_by, count(*) AS n FROM async_jobs
                         WHERE status = 'PROCESSING' GROUP BY requested_by) AS running
              WHERE rank + coalesce(n, 0) <= :p_max_per_caller
              ORDER BY due_at LIMIT :p_limit) AND <due, as CLAIM>

        It reads every due row (a window cannot take SKIP LOCKED), so the UPDATE checks
        CLAIM's condition again: a row another instance claimed meanwhile is skipped
        once its lock is released, never claimed twice.

        `urgent`: the most urgent first (priority, then due_at), in each caller's rank
        and across callers, instead of the oldest due first."""
        sql = self.transitions
        due_terms = sql.condition(CLAIM, claim_params)
        first = (t.c.priority,) if urgent else ()
        rank = func.row_number().over(
            partition_by=t.c.requested_by, order_by=(*first, t.c.due_at, t.c.id)
        )
        ranked = (
            select(t.c.id, t.c.due_at, t.c.priority, t.c.requested_by, rank.label("rank"))
            .where(*due_terms)
            .subquery("ranked")
        )
        running = (
            select(t.c.requested_by, func.count().label("n"))
            .where(t.c.status == JobStatus.PROCESSING.value, ACTIVE)
            .group_by(t.c.requested_by)
            .subquery("running")
        )
        fair = (
            select(ranked.c.id)
            .select_from(ranked.outerjoin(running, running.c.requested_by == ranked.c.requested_by))
            .where(
                ranked.c.rank + func.coalesce(running.c.n, 0)
                <= bindparam(P_MAX_PER_CALLER, type_=Integer)
            )
            .order_by(*((ranked.c.priority,) if urgent else ()), ranked.c.due_at)
            .limit(bindparam(P_LIMIT, type_=Integer))
        )
        ids = t.c.id == any_(array_of(fair.scalar_subquery())) if self.pg else t.c.id.in_(fair)
        return sql.update([CLAIM], claim_params, where=[ids, *due_terms])
