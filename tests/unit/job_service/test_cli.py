"""`job-service` flags and environment variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from san_jobs.job_service.cli import load_settings
from san_jobs.job_service.domain.model import JobType
from san_jobs.job_service.settings import JobServiceSettings


def settings_for(argv: list[str]) -> JobServiceSettings:
    return load_settings(argv)


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
    deadlines = settings.deadlines()
    assert set(deadlines) == set(JobType)  # every registered type has one
    assert deadlines[JobType.CARD_ANALYSIS] == 30.0
    assert deadlines[JobType.TIL_GENERATION] == deadlines[JobType.RECALL_GENERATION] == 60.0


def test_every_setting_is_read_from_its_environment_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    token_file = tmp_path / "gateway.token"
    token_file.write_text("gw-token-0123456789\n")  # read when the settings are made
    # field -> (its variable's text, the value the settings must hold), for every field:
    # each is set to something other than its default, and each is read back.
    values: dict[str, tuple[str, object]] = {
        "listen": ("0.0.0.0:6000", "0.0.0.0:6000"),
        "database_url": (
            "postgresql+asyncpg://postgres@127.0.0.1:5432/test",
            "postgresql+asyncpg://postgres@127.0.0.1:5432/test",
        ),
        "migrate_on_start": ("false", False),
        "gateway": ("gw:7000", "gw:7000"),
        "workers": ("7", 7),
        "lease": ("12.5", 12.5),
        "max_attempts": ("5", 5),
        "retry_base_delay": ("0.5", 0.5),
        "retry_max_delay": ("9", 9.0),
        "deadline": ("4", 4.0),
        "deadline_for": ('{"til-generation": 9}', {"TIL_GENERATION": 9.0}),
        "poll_interval": ("0.25", 0.25),
        "rate_limit": ('{"card-analysis": "20/s"}', {"CARD_ANALYSIS": 20.0}),
        "concurrency_limit": ('{"EMBEDDING": 4}', {"EMBEDDING": 4}),
        "max_running_per_caller": ("5", 5),
        "max_schedules_per_caller": ("7", 7),
        "breaker_failures": ("7", 7),
        "breaker_probe_interval": ("1.5", 1.5),
        "breaker_max_pause": ("60", 60.0),
        "batch_interval": ("0.01", 0.01),
        "grace": ("3", 3.0),
        "max_text_chars": ("500", 500),
        "submitter_most_urgent_priority": ("2", 2),
        "max_pending_per_caller": ("50", 50),
        "breaker_unreachable_after": ("0", 0.0),
        "urgent_callers": ("pager,alerts", "pager,alerts"),
        "max_streams": ("900", 900),
        "max_streams_per_peer": ("90", 90),
        "max_streams_per_connection": ("80", 80),
        "max_feeds": ("9", 9),
        "max_feeds_per_peer": ("2", 2),
        "max_message_bytes": ("1048576", 1_048_576),
        "instance_id": ("blue", "blue"),
        "log_level": ("debug", "DEBUG"),
        "retain_completed": ("12h", "12h"),
        "retain_failed": ("off", "off"),
        "retain_cancelled": ("86400", "1d"),
        "retain_changes": ("3600", "1h"),
        "prune_interval": ("30", 30.0),
        "log_format": ("json", "json"),
        "health_interval": ("0.5", 0.5),
        "otlp_endpoint": ("http://collector:4317", "http://collector:4317"),
        "metrics_listen": ("0.0.0.0:9464", "0.0.0.0:9464"),
        "event_loop": ("asyncio", "asyncio"),
        "tls_cert": ("/certs/js.pem", Path("/certs/js.pem")),
        "tls_key": ("/certs/js-key.pem", Path("/certs/js-key.pem")),
        "tls_client_ca": ("/certs/ca.pem", Path("/certs/ca.pem")),
        "tls_client_roles": ('{"web": "submitter"}', {"web": "submitter"}),
        "gateway_tls_ca": ("/certs/gw-ca.pem", Path("/certs/gw-ca.pem")),
        "gateway_tls_cert": ("/certs/client.pem", Path("/certs/client.pem")),
        "gateway_tls_key": ("/certs/client-key.pem", Path("/certs/client-key.pem")),
        "gateway_token_file": (str(token_file), token_file),
        "insecure": ("true", True),
        # As given, though 0.0.0.0 alone would mean "token".
        "auth": ("off", "off"),
    }
    assert set(values) == set(JobServiceSettings.model_fields)  # a new field is added here
    for field, (text, _) in values.items():
        monkeypatch.setenv(f"SAN_JOBS_{field.upper()}", text)
    settings = settings_for([])
    read = {field: getattr(settings, field) for field in values}
    assert read == {field: expected for field, (_, expected) in values.items()}
    assert set(settings.deadlines().values()) == {4.0}  # --deadline wins over deadline_for
    assert settings.gateway_token() == "gw-token-0123456789"


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
