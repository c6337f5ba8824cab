"""The SQL of every job-state write is compiled from its declaration: what the
declaration says is what the statement does, on PostgreSQL and SQLite."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from sqlalchemy import CheckConstraint
from sqlalchemy.dialects import postgresql, sqlite

from san_jobs.job_service.domain import transitions as tr
from san_jobs.job_service.storage import migrations
from san_jobs.job_service.storage.statements import Statements
from san_jobs.job_service.storage.tables import async_jobs
from san_jobs.job_service.storage.transition_sql import (
    TransitionSql,
    argument_columns,
    written_columns,
)

DIALECTS = {"postgres": postgresql.dialect(), "sqlite": sqlite.dialect()}
WRITES = [
    "enqueue",
    "enqueue_many",
    "claim",
    "fail_exhausted_leases",
    "renew_leases",
    "complete_many",
    "fail_many",
    "release",
    "cancel",
    "cancel_owned",
    "retry_failed",
]


def sql_of(statement: Any, dialect: str) -> str:
    return " ".join(str(statement.compile(dialect=DIALECTS[dialect])).split())


@pytest.fixture(params=list(DIALECTS))
def dialect(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_every_write_compiles(dialect: str) -> None:
    statements = Statements(dialect == "postgres", "instance")
    for name in WRITES:
        assert "async_jobs" in sql_of(getattr(statements, name), dialect), name


@pytest.mark.parametrize(
    ("transition", "due_at"),
    [
        # enqueued: due at once (updated_at), or a delayed job at its schedule time
        (tr.ENQUEUE, tr.Coalesce((tr.Arg("not_before"), tr.Now()))),
        (tr.CLAIM, tr.LeaseUntil()),  # when the lease runs out
        (tr.RENEW_LEASE, tr.LeaseUntil()),
        (tr.COMPLETE, tr.Lit(None)),
        (tr.FAIL_AND_RETRY, tr.Arg("retry_at")),  # not NULL where this one applies
        (tr.FAIL_FINAL, tr.Lit(None)),
        (tr.LEASE_EXHAUSTED, tr.Lit(None)),
        (tr.RELEASE, tr.Now()),
        (tr.CANCEL, tr.Lit(None)),
        (tr.RETRY_FAILED, tr.Now()),
    ],
    ids=lambda v: v.name if isinstance(v, tr.Transition) else "",
)
def test_due_at_is_the_derived_value_folded(transition: tr.Transition, due_at: tr.Expr) -> None:
    assert written_columns(transition)["due_at"] == due_at


def test_a_renewal_does_not_write_the_status_it_keeps() -> None:
    assert "status" not in written_columns(tr.RENEW_LEASE)
    assert written_columns(tr.CLAIM)["status"] == tr.Lit("PROCESSING")


def test_the_two_failures_share_one_statement_chosen_per_row(dialect: str) -> None:
    sql = sql_of(Statements(dialect == "postgres", "i").fail_many, dialect)
    retry_at = "r.retry_at" if dialect == "postgres" else "r.value ->> '$.retry_at'"
    assert f"due_at=({retry_at})" in sql or f"due_at={retry_at}" in sql
    assert f"next_attempt_at=({retry_at})" in sql or f"next_attempt_at={retry_at}" in sql
    assert f"WHEN (({retry_at}) IS NULL)" in sql or f"WHEN ({retry_at} IS NULL)" in sql


def test_a_changed_declaration_changes_the_statement(dialect: str) -> None:
    compiler = TransitionSql(dialect == "postgres", "i")
    marked = replace(tr.COMPLETE, sets={**tr.COMPLETE.sets, "cancel_reason": tr.Lit("marked")})
    plain = compiler.update([tr.COMPLETE], compiler.rows([tr.COMPLETE], per_row_time=True))
    changed = compiler.update([marked], compiler.rows([marked], per_row_time=True))
    assert "cancel_reason=" not in sql_of(plain, dialect)  # (RETURNING names it)
    assert "cancel_reason=" in sql_of(changed, dialect)


def test_an_argument_of_unknown_type_is_refused() -> None:
    odd = replace(tr.CANCEL, args=(*tr.CANCEL.args, "mystery"))
    with pytest.raises(TypeError, match="mystery"):
        argument_columns([odd])


def test_arguments_take_the_type_of_their_column() -> None:
    columns = argument_columns([tr.FAIL_FINAL, tr.FAIL_AND_RETRY])
    c = async_jobs.c
    assert columns == {
        "job_id": c.id,
        "token": c.claim_token,
        "code": c.error_code,
        "reason": c.error_reason,
        "message": c.error_message,
        "retry_at": c.next_attempt_at,
        "usage": c.result,  # a JSON object, typed as the JSON column
    }
    assert argument_columns([tr.CANCEL])["cancel_message"] is c.error_message


def test_the_hot_statements_keep_to_their_indexes(dialect: str) -> None:
    statements = Statements(dialect == "postgres", "i")
    claim = sql_of(statements.claim, dialect)
    # The partial index ix_async_jobs_due: its predicate, then an ordered range.
    assert "WHERE status IN ('PENDING', 'PROCESSING') AND async_jobs.due_at <=" in claim
    assert "ORDER BY async_jobs.due_at" in claim
    exhausted = sql_of(statements.fail_exhausted_leases, dialect)
    assert "status IN ('PENDING', 'PROCESSING') AND async_jobs.status = 'PROCESSING'" in exhausted
    # Outcomes find their rows by id and token, with no status test to mislead a planner.
    for name in ("complete_many", "fail_many", "renew_leases", "release"):
        where = sql_of(getattr(statements, name), dialect).split(" WHERE ", 1)[1]
        assert "async_jobs.claim_token =" in where and "status" not in where.split("RETURNING")[0]
    retry = sql_of(statements.retry_failed, dialect)
    assert "async_jobs.status = 'FAILED'" in retry  # the partial index on failed_at


def _migration(name: str) -> ModuleType:
    path = Path(migrations.__file__).parent / "versions" / name
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_due_at_check_of_migration_0005_is_the_declared_rule() -> None:
    """The migration writes its SQL out (it must not change with the code): today it
    is the same rule as transitions.DUE_AT_CHECK_SQL and the model's CHECK."""
    assert _migration("0005_due_at_check.py").DUE_AT_RULE == tr.DUE_AT_CHECK_SQL
    (modelled,) = (
        ck
        for ck in async_jobs.constraints
        if isinstance(ck, CheckConstraint) and ck.name == "ck_async_jobs_due_at"
    )
    assert str(modelled.sqltext) == tr.DUE_AT_CHECK_SQL
