import subprocess
import sys

import pytest

from ai_gateway.cli import load_settings


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


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["--rate-limit", "-1"], {}, "--rate-limit: Input should be greater than or equal to 0"),
        (["--listen", "nowhere"], {}, "--listen: Value error, expected HOST:PORT"),
        (["--backend", "gpt"], {}, "--backend: Input should be 'local', 'openai' or 'instant'"),
        ([], {"SAN_GATEWAY_FAULT_UNAVAILABLE_RATE": "2"}, "SAN_GATEWAY_FAULT_UNAVAILABLE_RATE"),
        (["--bogus"], {}, "unrecognized arguments: --bogus"),
    ],
)
def test_bad_values_exit_2_with_one_line(
    args: list[str], env: dict[str, str], expected: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ai_gateway", *args],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **env},
        timeout=30,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("ai-gateway: error: ")
    assert expected in lines[0]
    assert "Traceback" not in result.stderr
