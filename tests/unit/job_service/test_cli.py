"""`job-service` flags and environment variables."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from job_service.cli import FLAGS, build_parser, load_settings
from job_service.domain.model import JobType

BIN = Path(sys.executable).parent


def settings_for(argv: list[str]):  # type: ignore[no-untyped-def]
    return load_settings(build_parser().parse_args(argv))


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(__import__("os").environ):
        if name.startswith("SAN_JOBS_"):
            monkeypatch.delenv(name)
    settings = settings_for([])
    assert settings.listen == "127.0.0.1:50051"
    assert settings.gateway == "127.0.0.1:50052"
    assert settings.database_url == "sqlite+aiosqlite:///var/jobs.db"
    assert (settings.workers, settings.lease, settings.max_attempts) == (10, 60.0, 3)
    assert (settings.retry_base_delay, settings.retry_max_delay) == (2.0, 300.0)
    assert (settings.poll_interval, settings.grace) == (1.0, 30.0)
    assert settings.batch_interval == 0.002
    assert settings.event_loop == "uvloop"
    assert settings.deadlines() == {
        JobType.CARD_ANALYSIS: 30.0,
        JobType.TIL_GENERATION: 60.0,
        JobType.RECALL_GENERATION: 60.0,
    }


def test_every_flag_has_an_environment_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    token_file = tmp_path / "gateway.token"
    token_file.write_text("gw-token-0123456789\n")  # read when the settings are made
    values = {
        "listen": "0.0.0.0:6000",
        "database_url": "postgresql+asyncpg://postgres@127.0.0.1:5432/test",
        "gateway": "gw:7000",
        "workers": "7",
        "lease": "12.5",
        "max_attempts": "5",
        "retry_base_delay": "0.5",
        "retry_max_delay": "9",
        "deadline": "4",
        "poll_interval": "0.25",
        "batch_interval": "0.01",
        "grace": "3",
        "max_text_chars": "500",
        "max_streams": "900",
        "max_streams_per_peer": "90",
        "max_streams_per_connection": "80",
        "max_feeds": "9",
        "max_feeds_per_peer": "2",
        "max_message_bytes": "1048576",
        "instance_id": "blue",
        "log_level": "debug",
        "event_loop": "asyncio",
        "tls_cert": "/certs/js.pem",
        "tls_key": "/certs/js-key.pem",
        "tls_client_ca": "/certs/ca.pem",
        "gateway_tls_ca": "/certs/gw-ca.pem",
        "gateway_tls_cert": "/certs/client.pem",
        "gateway_tls_key": "/certs/client-key.pem",
        "gateway_token_file": str(token_file),
        "insecure": "true",
        "auth": "off",
    }
    assert {field for _, field, _, _ in FLAGS} == set(values)
    for field, value in values.items():
        monkeypatch.setenv(f"SAN_JOBS_{field.upper()}", value)
    settings = settings_for([])
    assert settings.listen == "0.0.0.0:6000"
    assert settings.workers == 7 and settings.lease == 12.5 and settings.grace == 3
    assert settings.instance_id == "blue" and settings.log_level == "DEBUG"
    assert settings.batch_interval == 0.01
    assert settings.event_loop == "asyncio"
    assert settings.max_message_bytes == 1_048_576
    assert set(settings.deadlines().values()) == {4.0}
    assert (settings.max_streams, settings.max_streams_per_peer) == (900, 90)
    assert (settings.max_streams_per_connection, settings.max_feeds) == (80, 9)
    assert settings.max_feeds_per_peer == 2
    assert settings.tls_client_ca == Path("/certs/ca.pem") and settings.insecure is True
    assert settings.gateway_tls_key == Path("/certs/client-key.pem")
    assert settings.gateway_token() == "gw-token-0123456789"
    assert settings.auth == "off"  # as given, though 0.0.0.0 alone would mean "token"


def test_stream_bounds_default_to_room_for_the_web_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in list(__import__("os").environ):
        if name.startswith("SAN_JOBS_"):
            monkeypatch.delenv(name)
    settings = settings_for(["--max-streams-per-peer", "50"])
    assert settings.max_streams_per_peer == 50
    assert (settings.max_streams, settings.max_streams_per_connection) == (10_000, 2_000)
    assert (settings.max_feeds, settings.max_feeds_per_peer) == (100, 10)


def test_flag_wins_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAN_JOBS_WORKERS", "7")
    assert settings_for(["--workers", "3"]).workers == 3


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--workers", "0"], "--workers (env SAN_JOBS_WORKERS)"),
        (
            ["--listen", "nowhere"],
            "--listen (env SAN_JOBS_LISTEN): Value error, expected HOST:PORT",
        ),
        (["--database-url", "mysql://x"], "--database-url (env SAN_JOBS_DATABASE_URL)"),
        (["--auth", "password"], "--auth (env SAN_JOBS_AUTH)"),
    ],
)
def test_bad_values_are_one_line_without_traceback(argv: list[str], message: str) -> None:
    result = subprocess.run(
        [str(BIN / "job-service"), *argv], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("job-service: invalid settings:")
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
