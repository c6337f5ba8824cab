"""Write the SQL of JobService's statements, as each dialect runs it, into
san_jobs/job_service/storage/sql/ (or the folder given), one file per dialect: the
hot statements, then the reads that are built per call from a filter (ListJobs'
pages, RetryFailed's candidates, usage, the change feed), each shown with every
filter set to example values (the shape every call has, with fewer terms).

Usage: python scripts/dump_sql.py [OUT_DIR]      (make sql)

The statements are built in code (storage/statements.py, from the declarations in
domain/transitions.py) so that both dialects and every write agree; these files are
how a reader (or a DBA) sees what that code sends. Values fixed in the statement are
shown inline; the parameters each call binds keep their names (`:p_now`, `:p_ids`).
A test regenerates them and fails when they differ (tests/unit/storage/
test_sql_files_fresh.py), as the generated protobuf code is held fresh.
"""

from __future__ import annotations

import re
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import literal
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.base import Executable
from sqlalchemy.sql.elements import TextClause

from san_jobs.job_service.domain.changes import ChangeFilter
from san_jobs.job_service.domain.model import JobFilter, JobStatus, JobType
from san_jobs.job_service.domain.ports import ReadChangesParams
from san_jobs.job_service.domain.usage import UsageQuery
from san_jobs.job_service.storage import changes, queries
from san_jobs.job_service.storage.statements import Statements

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "san_jobs" / "job_service" / "storage" / "sql"
# The notifications' origin: the real one is each instance's id.
INSTANCE_ID = "INSTANCE"
DIALECTS: dict[str, tuple[bool, Dialect]] = {
    "postgresql": (True, postgresql.dialect(paramstyle="named")),  # type: ignore[no-untyped-call]
    "sqlite": (False, sqlite.dialect(paramstyle="named")),
}
_BIND = re.compile(r"(?<![:\w]):(\w+)")
_EXPANDING = re.compile(r"__\[POSTCOMPILE_(\w+)\]")
_BREAK_BEFORE = re.compile(
    r" (?=(?:FROM|WHERE|SET|RETURNING|ORDER BY|LIMIT|VALUES|ON CONFLICT|GROUP BY|"
    r"UNION ALL|INSERT INTO|UPDATE|SELECT|WITH(?! TIME ZONE)) )"
)


def render(statement: Executable, dialect: Dialect) -> str:
    """The statement as `dialect` runs it, with its fixed values inline (a statement
    written as SQL text, as written)."""
    if isinstance(statement, TextClause):
        return textwrap.dedent(statement.text).strip()
    compiled = statement.compile(dialect=dialect)  # type: ignore[attr-defined]
    values: dict[str, Any] = compiled.params

    def inline(match: re.Match[str]) -> str:
        name = match.group(1)
        if name.startswith("p_") or values.get(name) is None:
            return match.group(0)  # bound by each call
        bind = compiled.binds[name]
        shown = literal(values[name], type_=bind.type)
        return str(shown.compile(dialect=dialect, compile_kwargs={"literal_binds": True}))

    text = _BIND.sub(inline, str(compiled))
    text = _EXPANDING.sub(r":\1", text)  # a list parameter (IN ...), expanded per call
    text = _BREAK_BEFORE.sub("\n", text)
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


# Example values for the reads built per call (every filter set).
_AT = datetime(2026, 1, 1, tzinfo=UTC)
_EVERY_FILTER = JobFilter(
    job_ids=("00000000-0000-0000-0000-000000000001",),
    statuses=(JobStatus.FAILED,),
    job_types=(JobType.CARD_ANALYSIS,),
    target_ids=("scrap-1",),
    error_message_contains="Timeout",
    created_after=_AT,
    created_before=_AT + timedelta(days=1),
    failed_after=_AT,
    failed_before=_AT + timedelta(days=1),
    requested_by="caller",
)


def reads(pg: bool) -> dict[str, Executable]:
    """The reads built per call, each with every filter set."""
    where = queries.job_filter(_EVERY_FILTER, pg)
    usage = UsageQuery(_AT, _AT + timedelta(days=1), (JobType.CARD_ANALYSIS,), "caller")
    wanted = ChangeFilter((JobType.CARD_ANALYSIS,), (JobStatus.COMPLETED,), "caller")
    return {
        "list_jobs_page": queries.page(where, 100, (_AT, "00000000-0000-0000-0000-000000000009")),
        "retry_candidates": queries.retry_candidates(where, 1000, lock=pg),
        "active_for_targets": queries.active_for_targets(["scrap-1", "scrap-2"]),
        "next_due_at": queries.next_due_at(),
        "usage_totals": queries.usage_totals(usage, 1000, pg),
        "change_feed_read": changes.changes_query(ReadChangesParams(10, 5010, wanted, 500)),
        # The sequencer's write (PostgreSQL), under the feed row's lock; SQLite's
        # trigger gives positions itself, and the feed only reads its state.
        "change_feed_sequence": changes.SEQUENCE_PG if pg else changes.FEED_STATE,
    }


def dump(out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, (pg, dialect) in DIALECTS.items():
        statements = Statements(pg, INSTANCE_ID)
        parts = [
            f"-- JobService's statements on {name}: the hot ones as storage/statements.py\n"
            "-- builds them, then the reads built per call (storage/queries.py, changes.py)\n"
            "-- with every filter set to example values.\n"
            "-- Generated by scripts/dump_sql.py (make sql): do not edit.\n"
        ]
        for attribute, value in vars(statements).items():
            if isinstance(value, Executable):
                parts.append(f"-- name: {attribute}\n{render(value, dialect)};\n")
        for attribute, value in reads(pg).items():
            parts.append(f"-- name: {attribute} (built per call)\n{render(value, dialect)};\n")
        path = out_dir / f"{name}.sql"
        path.write_text("\n".join(parts), encoding="utf-8")
        written.append(path)
    return written


def main() -> None:
    out_dir = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else DEFAULT_OUT
    for path in dump(out_dir):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
