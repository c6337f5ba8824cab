"""The ai-gateway command as an operator meets it, in a real process: a bad flag,
environment variable or API key file is one line on stderr and exit status 2, never a
traceback. (Moved out of tests/unit/ai_gateway/test_gateway_cli.py: each case starts a
Python process.)"""

import subprocess
import sys
from pathlib import Path

import pytest

KEY = "sk-from-file-0123456789abcdef"


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
        [sys.executable, "-m", "san_jobs.ai_gateway", *args],
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


def _run_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "san_jobs.ai_gateway", *args],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **env},
        timeout=30,
    )


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["--openai-api-key-file", "{missing}"], {}, "cannot read the API key file"),
        (["--openai-api-key-file", "{dir}"], {}, "cannot read the API key file"),
        (["--openai-api-key-file", "{empty}"], {}, "is empty"),
        # One key, as a header carries it: a space inside is refused at start (it was
        # sent, and turned away by the upstream at the first call).
        (["--openai-api-key-file", "{spaced}"], {}, "must hold one token"),
        (
            ["--openai-api-key", KEY, "--openai-api-key-file", "{key}"],
            {},
            "--openai-api-key-file: Value error, give the API key or the API key file, not both",
        ),
        (
            [],
            {"SAN_GATEWAY_OPENAI_API_KEY": KEY, "SAN_GATEWAY_OPENAI_API_KEY_FILE": "{key}"},
            "SAN_GATEWAY_OPENAI_API_KEY_FILE: Value error, give the API key or the API key file",
        ),
    ],
)
def test_a_bad_key_file_is_a_one_line_startup_error(
    tmp_path: Path, args: list[str], env: dict[str, str], expected: str
) -> None:
    paths = {
        "missing": tmp_path / "missing.key",
        "dir": tmp_path,
        "empty": tmp_path / "empty.key",
        "key": tmp_path / "openai.key",
        "spaced": tmp_path / "spaced.key",
    }
    paths["empty"].write_text("\n")
    paths["spaced"].write_text("sk-first half second-half\n")
    paths["key"].write_text(KEY)
    fill = {name: str(path) for name, path in paths.items()}
    result = _run_cli(
        [a.format(**fill) for a in args], {k: v.format(**fill) for k, v in env.items()}
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("ai-gateway: error: ")
    assert expected in lines[0]
    assert KEY not in result.stderr
