"""The checked-in SQL of the statements (san_jobs/job_service/storage/sql/) is what
the code builds today: regenerated into a temporary folder and compared byte for byte,
as the generated protobuf code is. A change to a statement shows in review as SQL."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKED_IN = ROOT / "san_jobs" / "job_service" / "storage" / "sql"


def test_the_sql_files_are_fresh(tmp_path: Path) -> None:
    made = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "dump_sql.py"), str(tmp_path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    fresh = sorted(path.name for path in tmp_path.glob("*.sql"))
    assert fresh == ["postgresql.sql", "sqlite.sql"]
    assert sorted(path.name for path in CHECKED_IN.glob("*.sql")) == fresh
    stale = [
        name for name in fresh if (tmp_path / name).read_text() != (CHECKED_IN / name).read_text()
    ]
    assert not stale, f"stale SQL files {stale}: run `make sql` and commit them"


def test_every_hot_statement_is_in_both_files() -> None:
    names = {
        path.stem: [line.removeprefix("-- name: ") for line in path.read_text().splitlines()
                    if line.startswith("-- name: ")]
        for path in CHECKED_IN.glob("*.sql")
    }  # fmt: skip
    assert names["postgresql"] == names["sqlite"]
    assert {"enqueue", "claim", "complete_many", "fail_many", "cancel", "retry_failed"} <= set(
        names["sqlite"]
    )
