"""The job-service command as an operator meets it, in a real process: a bad flag or
environment variable is one line on stderr and exit status 2, an unusable database one
line and status 1, never a traceback; `job-service migrate` creates the table. (Moved
out of tests/unit/job_service/test_cli.py: each case starts a Python process.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--workers", "0"], {}, "--workers: Input should be greater than or equal to 1 (got '0')"),
        (["--listen", "nowhere"], {}, "--listen: Value error, expected HOST:PORT"),
        (["--database-url", "mysql://x"], {}, "--database-url: Value error, expected sqlite"),
        (["--auth", "password"], {}, "--auth: Input should be 'off' or 'token'"),
        (["--tls-client-roles", "web=submitter"], {}, "--tls-client-roles needs --tls-client-ca"),
        (["--tls-client-roles", "web=boss"], {}, "--tls-client-roles web: Input should be"),
        ([], {"SAN_JOBS_WORKERS": "many"}, "SAN_JOBS_WORKERS: Input should be a valid integer"),
        (["--bogus"], {}, "unrecognized arguments: --bogus"),
    ],
)
def test_bad_values_are_one_line_without_traceback(
    argv: list[str], env: dict[str, str], message: str
) -> None:
    result = subprocess.run(
        [str(BIN / "job-service"), *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", **env},
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("job-service: error: "), result.stderr
    assert message in lines[0]
    assert "Traceback" not in result.stderr


def test_unusable_database_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = subprocess.run(
        [
            str(BIN / "job-service"),
            "migrate",
            "--database-url",
            f"sqlite+aiosqlite:///{blocker}/jobs.db",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "job-service: cannot prepare the database" in result.stderr
    assert "Traceback" not in result.stderr


def test_migrate_command_creates_the_table(tmp_path: Path) -> None:
    import sqlite3

    database = tmp_path / "jobs.db"
    result = subprocess.run(
        [str(BIN / "job-service"), "migrate", "--database-url", f"sqlite+aiosqlite:///{database}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    with sqlite3.connect(database) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "async_jobs" in tables
