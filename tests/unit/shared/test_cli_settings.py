"""san_jobs.shared.cli_settings: flags derived from a settings model, read over the
environment, and a bad value as one line naming where it came from."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Literal

import pytest
from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from san_jobs.shared.cli_settings import (
    EXIT_USAGE,
    HostPort,
    SettingsParser,
    flags_given,
    settings_of,
)


class DemoSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SAN_DEMO_", extra="forbid")

    listen: HostPort = Field("127.0.0.1:1", description="where to listen")
    max_message_bytes: int = Field(10, ge=1, description="largest message, bytes")
    ratio: float = Field(0.5, ge=0, le=1, description="a share")
    insecure: bool = Field(False, description="a switch")
    mode: Literal["off", "on"] | None = Field(None, description="off or on")
    cert: Path | None = Field(None, description="a file")
    password: SecretStr = Field(SecretStr(""), description="a secret")
    deadline_for: dict[str, float] = Field(
        default_factory=dict,
        description="seconds by name",
        json_schema_extra={"metavar": "NAME=SECONDS"},
    )


@pytest.fixture(autouse=True)
def _no_demo_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("SAN_DEMO_"):
            monkeypatch.delenv(name)


def parser() -> SettingsParser:
    return SettingsParser(prog="demo", settings=DemoSettings)


def read(*argv: str) -> DemoSettings:
    return settings_of(parser().parse_args(list(argv)), DemoSettings)


def refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one stderr line a refused command line gives (exit code 2)."""
    with pytest.raises(SystemExit) as exited:
        parser().parse_args(list(argv))
    assert exited.value.code == EXIT_USAGE
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert captured.out == "" and len(lines) == 1, captured.err
    return lines[0]


def test_each_field_is_a_flag_named_after_it() -> None:
    options = {option for action in parser()._actions for option in action.option_strings}
    assert options == {
        "-h", "--help", "--listen", "--max-message-bytes", "--ratio", "--insecure",
        "--no-insecure", "--mode", "--cert", "--password", "--deadline-for",
    }  # fmt: skip
    settings = read("--max-message-bytes", "20", "--mode", "on", "--cert", "c.pem")
    assert (settings.max_message_bytes, settings.mode, settings.cert) == (20, "on", Path("c.pem"))


def test_defaults_without_flags_or_variables() -> None:
    settings = read()
    assert settings == DemoSettings()
    assert settings.mode is None and settings.cert is None and settings.deadline_for == {}


def test_a_flag_wins_over_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAN_DEMO_MAX_MESSAGE_BYTES", "30")
    monkeypatch.setenv("SAN_DEMO_RATIO", "0.25")
    args = parser().parse_args(["--max-message-bytes", "40"])
    settings = settings_of(args, DemoSettings)
    assert (settings.max_message_bytes, settings.ratio) == (40, 0.25)
    assert flags_given(args) == {"max_message_bytes"}
    # The namespace holds every setting too, for code that reads it.
    assert (args.max_message_bytes, args.ratio, args.listen) == (40, 0.25, "127.0.0.1:1")


def test_a_switch_turns_on_and_off_over_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert read("--insecure").insecure is True
    monkeypatch.setenv("SAN_DEMO_INSECURE", "true")
    assert read().insecure is True
    assert read("--no-insecure").insecure is False
    monkeypatch.setenv("SAN_DEMO_INSECURE", "0")
    assert read().insecure is False


def test_a_mapping_is_repeated_key_value_flags_or_json(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = read("--deadline-for", "a=1.5", "--deadline-for", "b=2")
    assert settings.deadline_for == {"a": 1.5, "b": 2.0}
    monkeypatch.setenv("SAN_DEMO_DEADLINE_FOR", '{"a": 9, "c": 3}')
    assert read().deadline_for == {"a": 9.0, "c": 3.0}
    # Merged key by key, the flag's value winning for its key.
    assert read("--deadline-for", "a=1").deadline_for == {"a": 1.0, "c": 3.0}


def test_help_shows_each_fields_description_default_and_variable() -> None:
    text = " ".join(parser().format_help().split())
    assert "--max-message-bytes MAX_MESSAGE_BYTES largest message, bytes (default 10) " in text
    assert "[env SAN_DEMO_MAX_MESSAGE_BYTES]" in text
    assert "--mode {off,on} off or on [env SAN_DEMO_MODE]" in text
    assert "--cert PATH a file [env SAN_DEMO_CERT]" in text
    assert "--deadline-for NAME=SECONDS seconds by name [env SAN_DEMO_DEADLINE_FOR]" in text
    assert "--insecure, --no-insecure a switch [env SAN_DEMO_INSECURE]" in text


@pytest.mark.parametrize(
    ("argv", "env", "line"),
    [
        (
            ["--max-message-bytes", "0"], {},
            "demo: error: --max-message-bytes: Input should be greater than or equal to 1 "
            "(got '0')",
        ),
        (
            [], {"SAN_DEMO_MAX_MESSAGE_BYTES": "0"},
            "demo: error: SAN_DEMO_MAX_MESSAGE_BYTES: Input should be greater than or equal "
            "to 1 (got '0')",
        ),
        (
            ["--mode", "maybe"], {},
            "demo: error: --mode: Input should be 'off' or 'on' (got 'maybe')",
        ),
        (
            ["--listen", "nowhere"], {},
            "demo: error: --listen: Value error, expected HOST:PORT with a port from 0 to "
            "65535, got 'nowhere'",
        ),
        (
            ["--deadline-for", "a=soon"], {},
            "demo: error: --deadline-for a: Input should be a valid number, unable to parse "
            "string as a number (got 'soon')",
        ),
        (
            ["--deadline-for", "a"], {},
            "demo: error: argument --deadline-for: expected KEY=VALUE, got 'a'",
        ),
        (
            [], {"SAN_DEMO_DEADLINE_FOR": '{"a": 1'},
            "demo: error: SAN_DEMO_DEADLINE_FOR: expected JSON (Expecting ',' delimiter: "
            "line 1 column 8 (char 7))",
        ),
        (
            ["--ratio", "2", "--max-message-bytes", "0"], {},
            "demo: error: --max-message-bytes: Input should be greater than or equal to 1 "
            "(got '0'); --ratio: Input should be less than or equal to 1 (got '2')",
        ),
        (["--bogus"], {}, "demo: error: unrecognized arguments: --bogus"),
    ],
)  # fmt: skip
def test_a_bad_value_is_one_line_naming_where_it_came_from(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    env: dict[str, str],
    line: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert refusal(capsys, *argv) == line


def test_a_url_password_in_a_refused_value_is_masked(capsys: pytest.CaptureFixture[str]) -> None:
    line = refusal(capsys, "--listen", "postgresql://svc:hunter2@db")
    assert "hunter2" not in line and "svc:***@" in line


def test_a_secret_is_never_quoted(capsys: pytest.CaptureFixture[str]) -> None:
    class Keyed(BaseSettings):
        model_config = SettingsConfigDict(env_prefix="SAN_DEMO_")
        key: SecretStr = Field(SecretStr(""), min_length=30, description="an API key")

    with pytest.raises(SystemExit):
        SettingsParser(prog="demo", settings=Keyed).parse_args(["--key", "sk-short-secret"])
    err = capsys.readouterr().err
    assert err.startswith("demo: error: --key: ") and "sk-short-secret" not in err


def test_help_and_usage_errors_need_no_valid_settings(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SAN_DEMO_RATIO", "7")
    with pytest.raises(SystemExit) as exited:
        parser().parse_args(["--help"])
    assert exited.value.code == 0 and "[env SAN_DEMO_RATIO]" in capsys.readouterr().out


def test_subcommand_parsers_are_plain_and_one_line() -> None:
    root = parser()
    commands = root.add_subparsers(dest="command", required=True)
    get = commands.add_parser("get")
    get.add_argument("job_id")
    assert isinstance(get, SettingsParser) and get.settings_model is None
    args = root.parse_args(["--ratio", "0.1", "get", "j-1"])
    assert (args.command, args.job_id, settings_of(args, DemoSettings).ratio) == ("get", "j-1", 0.1)


def test_a_field_without_help_text_or_flag_kind_is_a_bug() -> None:
    class Undocumented(BaseSettings):
        workers: int = 1

    class Listed(BaseSettings):
        names: list[str] = Field(default_factory=list, description="names")

    with pytest.raises(TypeError, match=r"Undocumented.workers has no description"):
        SettingsParser(settings=Undocumented)
    with pytest.raises(TypeError, match=r"Listed.names: no flag for"):
        SettingsParser(settings=Listed)


def test_settings_of_names_what_is_missing() -> None:
    with pytest.raises(TypeError, match="no DemoSettings"):
        settings_of(argparse.Namespace(), DemoSettings)
