"""The one answer of an Enqueue whose INSERT met a unique index, and the row it inserts.

Enqueue (job_commands.SqlJobCommands.enqueue_in, which a schedule's period goes
through too) and a dependent's Enqueue (dependencies.py) insert with ON CONFLICT DO
NOTHING and, when a unique index stopped the row, answer alike: the tenant's job
holding the request_id (deduplicated), else the tenant's active job of the target
(returned or DuplicateJobError), else insert again (the winner left the active states
meanwhile).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from san_jobs.job_service.domain.errors import (
    DuplicateJobError,
)
from san_jobs.job_service.domain.model import (
    Job,
    NewJob,
    OnDuplicate,
)
from san_jobs.job_service.storage.connections import Connections
from san_jobs.job_service.storage.statements import Statements


def enqueue_row(job_id: str, new: NewJob) -> dict[str, Any]:
    """ENQUEUE's arguments for `new` (the single INSERT binds them), which are also
    its JSON row for the batched INSERT (`Statements.enqueue_rows`), used as they
    are: the generic `enqueue_rows.row(**enqueue_row(...))`'s kwargs, key check
    and per-field loops were ~8 % of the job-service's CPU in a BatchEnqueue (issue
    15). The same row but for `request_params`, which goes in as the JSON object
    itself rather than as its JSON text: both databases read an object in a text
    field as its JSON text (jsonb_to_recordset, `->>`), which the INSERT casts to the
    column's JSON, so the batch's one json_text does what was a second one per row
    (a unit test checks the fields, the storage tests what is stored)."""
    return {
        "job_id": job_id,
        "job_type": new.job_type.value,
        "target_id": new.target_id,
        "request_params": new.request_params,
        "requested_by": new.requested_by,
        "request_id": new.request_id,
        "max_attempts": new.max_attempts,
        "traceparent": new.traceparent,
        "tenant": new.tenant,
        "scheduled_at": new.scheduled_at,
        "not_before": new.not_before,
        "priority": new.priority,
    }


# An Enqueue whose INSERT conflicted with a job that then left the active states (so
# nothing conflicts any more) inserts again, at most this many times in all.
CONFLICT_TRIES = 5
KEPT_CONFLICTING = "enqueue kept conflicting with jobs that changed state"


async def conflict_answer(
    db: Connections,
    sql: Statements,
    conn: AsyncConnection,
    new: NewJob,
    on_duplicate: OnDuplicate,
) -> tuple[Job, bool] | None:
    """Enqueue's answer when its INSERT met a unique index: the job holding
    `new`'s request_id (deduplicated), else the active job of its target
    (returned, or DuplicateJobError); None if neither exists any more (it left the
    active states meanwhile: insert again). The winner is looked for in the
    caller's tenant only: the indexes refuse a row for its own tenant's keys alone."""
    if new.request_id is not None:
        same = await db.jobs(
            conn, sql.by_request_id, {"p_request_id": new.request_id, "p_tenant": new.tenant}
        )
        if same:
            return same[0], True
    active = await db.jobs(
        conn,
        sql.active_for_target,
        {
            "p_job_type": new.job_type.value,
            "p_target_id": new.target_id,
            "p_tenant": new.tenant,
        },
    )
    if not active:
        return None
    if on_duplicate is OnDuplicate.RETURN_EXISTING:
        return active[0], True
    raise DuplicateJobError(active[0].id)
