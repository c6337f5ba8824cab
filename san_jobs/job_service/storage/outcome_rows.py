"""What the outcome writes (complete, fail) send back, and the Job made of it.

An outcome statement used to return every column (`RETURNING *`), so for each job
written PostgreSQL sent back, and asyncpg decoded, the job's input (request_params:
JSONB of up to 100k characters) only for the worker to drop it: the worker holds the
very same values from its claim. The columns no transition after ENQUEUE writes
(KEPT_COLUMNS; tests/unit/storage/test_outcome_rows.py checks them against every
declaration in domain/transitions.py) are therefore left out of RETURNING and taken
from the job as it was claimed, or, for a caller that has none, read by id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from san_jobs.job_service.domain.model import Job
from san_jobs.job_service.storage.rows import row_to_job
from san_jobs.job_service.storage.tables import async_jobs

# Written once, by ENQUEUE; the same in every later state of the row.
KEPT_COLUMNS = frozenset(
    {
        "job_type",
        "target_id",
        "request_params",
        "requested_by",
        "request_id",
        "created_at",
        "traceparent",
        "tenant",
    }
)
# Job fields no column holds: filled in by the reads that need them.
COMPUTED_FIELDS = frozenset({"waiting_on"})

# Columns a Job does not hold: the claim's order (due_at) and the chain's depth, read
# only by the Enqueue of a dependent (storage/dependencies.py).
STORAGE_ONLY_COLUMNS = frozenset({"due_at", "dependency_depth"})

# What complete_many and fail_many return: everything else (id and status included,
# which the PostgreSQL notification needs).
OUTCOME_COLUMNS: tuple[Any, ...] = tuple(
    c for c in async_jobs.c if c.name not in KEPT_COLUMNS | STORAGE_ONLY_COLUMNS
)


def check_claimed(job_id: str, claimed: Job | None) -> None:
    """An outcome of `job_id` given another job as its claimed one: a bug, refused."""
    if claimed is not None and claimed.id != job_id:
        raise ValueError(f"an outcome of job {job_id} given job {claimed.id} as claimed")


def outcome_job(row: Mapping[str, Any], kept: Job) -> Job:
    """The job an outcome statement wrote: its returned `row` (OUTCOME_COLUMNS) and,
    from `kept` (the same job as claimed or read), the KEPT_COLUMNS."""
    if row["id"] != kept.id:
        raise ValueError(f"row of job {row['id']} joined with job {kept.id}")
    return row_to_job({**row, **_kept_values(kept)})


def _kept_values(kept: Job) -> dict[str, Any]:
    """KEPT_COLUMNS of `kept`, as its row holds them."""
    return {
        "job_type": kept.job_type.value,
        "target_id": kept.target_id,
        "request_params": kept.request_params,
        "requested_by": kept.requested_by,
        "request_id": kept.request_id,
        "created_at": kept.created_at,
        "traceparent": kept.traceparent,
        "tenant": kept.tenant,
    }
