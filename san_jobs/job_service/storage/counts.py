"""Jobs by (job_type, status) without counting the table, and the rest of stats() in
the same statement.

Counting ten million finished jobs took 6.3 s on PostgreSQL (issue 14); a metrics
scrape may cost one cheap query. So the database keeps the counts itself, with
triggers on async_jobs (created by migration 0009 from the DDL below): every insert,
status change and delete counts, whatever made it (a transition, RetryFailed, cancel,
the pruner's DELETE, an operator's own SQL), in the writer's own transaction.

- PostgreSQL: each change appends (job_type, status, +1/-1) rows to
  async_job_count_deltas. Appending takes no lock another writer waits for; an
  `UPDATE ... SET n = n + 1` of one row per (type, status) would make every
  concurrent transaction that completes a job queue on that row until the previous
  one commits. `fold_counts` (every few seconds, from each job-service:
  san_jobs/job_service/count_folding.py) moves the deltas into async_job_counts in one
  statement, so the table read by stats() stays a few rows plus a few seconds' deltas.
- SQLite has one writer at a time: its triggers update async_job_counts directly and
  the deltas table stays empty.

A count is always the sum of both tables, read in one snapshot, so it is exact at
every moment, folded or not.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, String, bindparam, text

from san_jobs.job_service.storage.tables import UtcDateTime

# stats() in one statement: the counts (folded + deltas), and for the PENDING rows of
# each type the oldest due time (one probe of ix_async_jobs_pending_type_due per type
# with PENDING jobs), and the oldest PENDING created_at (one probe of
# ix_async_jobs_pending_created_at, computed once). The PENDING terms repeat the
# partial indexes' predicate word for word: SQLite uses a partial index only then.
_STATS_SQL = """
WITH totals AS (
    SELECT job_type, status, SUM(n) AS n
    FROM (
        SELECT job_type, status, n FROM async_job_counts
        UNION ALL
        SELECT job_type, status, delta FROM async_job_count_deltas
    ) AS parts
    GROUP BY job_type, status
)
SELECT
    totals.job_type AS job_type,
    totals.status AS status,
    totals.n AS n,
    CASE WHEN totals.status = 'PENDING' THEN (
        SELECT MIN(due_at) FROM async_jobs
        WHERE async_jobs.job_type = totals.job_type
          AND status = 'PENDING'
          AND due_at <= :now
    ) END AS oldest_due,
    (SELECT MIN(created_at) FROM async_jobs WHERE status = 'PENDING') AS oldest_pending
FROM totals
WHERE totals.n <> 0
"""


def stats_statement() -> Any:
    """Rows (job_type, status, n, oldest_due, oldest_pending), one per (type, status)
    with jobs; bind `now`. oldest_pending is the same on every row (no rows: no jobs)."""
    return (
        text(_STATS_SQL)
        .bindparams(bindparam("now", type_=UtcDateTime))
        .columns(
            job_type=String,
            status=String,
            n=BigInteger,
            oldest_due=UtcDateTime,
            oldest_pending=UtcDateTime,
        )
    )


# PostgreSQL: take every committed delta and add it to the totals, in one statement
# (one short transaction). Deltas of transactions still open are not seen and wait for
# the next fold; a concurrent fold waits on the rows this one deletes, then skips them.
_FOLD_PG_SQL = """
WITH moved AS (
    DELETE FROM async_job_count_deltas RETURNING job_type, status, delta
), summed AS (
    SELECT job_type, status, SUM(delta) AS n, COUNT(*) AS moved_rows
    FROM moved GROUP BY job_type, status
), folded AS (
    INSERT INTO async_job_counts (job_type, status, n)
    SELECT job_type, status, n FROM summed
    ON CONFLICT (job_type, status) DO UPDATE SET n = async_job_counts.n + EXCLUDED.n
)
SELECT COALESCE(SUM(moved_rows), 0) FROM summed
"""


def fold_statement() -> Any:
    """PostgreSQL only: how many delta rows were folded."""
    return text(_FOLD_PG_SQL)
