"""The outcome writes return only the columns an outcome can change (storage/
outcome_rows.py): the others are written by ENQUEUE alone, so the claimed job's
values are the stored ones."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy.dialects import postgresql, sqlite

from san_jobs.job_service.domain import transitions as tr
from san_jobs.job_service.domain.model import Job, JobStatus, JobType
from san_jobs.job_service.storage.outcome_rows import (
    COMPUTED_FIELDS,
    KEPT_COLUMNS,
    OUTCOME_COLUMNS,
    outcome_job,
)
from san_jobs.job_service.storage.statements import Statements
from san_jobs.job_service.storage.tables import async_jobs


def test_no_transition_but_enqueue_writes_a_kept_column() -> None:
    for transition in tr.TRANSITIONS:
        if transition is tr.ENQUEUE:
            continue
        assert not KEPT_COLUMNS & set(transition.columns()), transition.name
    assert set(tr.ENQUEUE.columns()) | {"created_at"} >= KEPT_COLUMNS
    assert set(async_jobs.c.keys()) >= KEPT_COLUMNS
    # Written by the attempt edits, so never kept.
    assert "attempts" not in KEPT_COLUMNS


def test_every_job_field_is_returned_or_kept() -> None:
    returned = {c.name for c in OUTCOME_COLUMNS}
    assert {"id", "status"} <= returned  # the PostgreSQL notification needs them
    assert set(Job.__dataclass_fields__) == returned | KEPT_COLUMNS | COMPUTED_FIELDS
    assert not COMPUTED_FIELDS & set(async_jobs.c.keys())


DIALECTS: dict[bool, Any] = {True: postgresql.dialect(), False: sqlite.dialect()}


@pytest.mark.parametrize("pg", [True, False])
def test_the_outcome_statements_do_not_send_the_input_back(pg: bool) -> None:
    sql = Statements(pg, "instance-1")
    dialect = DIALECTS[pg]
    statements: list[Any] = [sql.complete_many, sql.fail_many]
    for statement in statements:
        text = str(statement.compile(dialect=dialect))
        assert "request_params" not in text
        assert "attempts" in text and "result" in text
    assert "request_params" in str(sql.claim.compile(dialect=dialect))  # the claim does


def test_outcome_job_refuses_a_row_of_another_job() -> None:
    now = datetime(2024, 1, 1, tzinfo=UTC)
    kept = Job(
        id="job-a",
        job_type=JobType.CARD_ANALYSIS,
        status=JobStatus.PROCESSING,
        target_id="t",
        request_params={"text": "x"},
        requested_by="me",
        request_id=None,
        result=None,
        error_message=None,
        error_code=None,
        error_reason=None,
        attempt_count=1,
        max_attempts=3,
        created_at=now,
        updated_at=now,
        started_at=now,
        completed_at=None,
        failed_at=None,
        cancelled_at=None,
        cancel_reason=None,
        next_attempt_at=None,
        lease_expires_at=now,
        claim_token="tok",
    )
    row = {c.name: None for c in OUTCOME_COLUMNS} | {"id": "job-b", "status": "COMPLETED"}
    with pytest.raises(ValueError, match="job-b"):
        outcome_job(row, kept)
