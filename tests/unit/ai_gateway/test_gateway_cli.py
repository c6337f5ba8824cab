from pathlib import Path

import pytest

from san_jobs.ai_gateway.cli import load_settings


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings([])
    assert settings.listen == "127.0.0.1:50052"
    assert settings.backend == "local"
    assert settings.max_input_tokens == 8192
    assert settings.rate_limit == 0
    assert not settings.faults().enabled
    assert settings.event_loop == "uvloop"


def test_env_then_flags_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAN_GATEWAY_FAULT_LATENCY", "0.5")
    monkeypatch.setenv("SAN_GATEWAY_BACKEND", "instant")
    monkeypatch.setenv("SAN_GATEWAY_RATE_LIMIT", "3")
    settings = load_settings(["--rate-limit", "7", "--fault-seed", "4", "--log-level", "debug"])
    assert settings.fault_latency == 0.5
    assert settings.backend == "instant"
    assert settings.rate_limit == 7
    assert settings.fault_seed == 4
    assert settings.log_level == "DEBUG"
    assert settings.faults().enabled


KEY = "sk-from-file-0123456789abcdef"


def test_api_key_from_a_file_without_its_trailing_newline(tmp_path: Path) -> None:
    key_file = tmp_path / "openai.key"
    key_file.write_text(KEY + "\n")
    settings = load_settings(["--openai-api-key-file", str(key_file)])
    assert settings.api_key().get_secret_value() == KEY
    assert KEY not in repr(settings)


def test_api_key_file_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key_file = tmp_path / "openai.key"
    key_file.write_text(KEY + "\r\n")
    monkeypatch.setenv("SAN_GATEWAY_OPENAI_API_KEY_FILE", str(key_file))
    assert load_settings([]).api_key().get_secret_value() == KEY


def test_without_a_file_the_key_setting_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAN_GATEWAY_OPENAI_API_KEY", KEY)
    assert load_settings([]).api_key().get_secret_value() == KEY
