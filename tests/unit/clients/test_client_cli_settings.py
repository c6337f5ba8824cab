"""jobsctl's and san-web's settings come from their models like the services' do: a
bad flag or variable is one line naming it, exit code 2."""

from __future__ import annotations

import os

import pytest

from san_jobs.jobsctl import cli as jobsctl
from san_jobs.jobsctl._connection import resolve
from san_jobs.web import cli as web


@pytest.fixture(autouse=True)
def _no_client_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("SAN_JOBSCTL_", "SAN_WEB_")):
            monkeypatch.delenv(name)


@pytest.mark.parametrize(
    ("argv", "env", "line"),
    [
        (
            ["--timeout", "0", "stats"], {},
            "jobsctl: error: --timeout: Input should be greater than 0 (got '0') "
            "(see 'jobsctl --help')",
        ),
        (
            ["stats"], {"SAN_JOBSCTL_TIMEOUT": "soon"},
            "jobsctl: error: SAN_JOBSCTL_TIMEOUT: Input should be a valid number, unable to "
            "parse string as a number (got 'soon') (see 'jobsctl --help')",
        ),
        (
            ["stats"], {"SAN_JOBSCTL_TLS": "maybe"},
            "jobsctl: error: SAN_JOBSCTL_TLS: Input should be a valid boolean, unable to "
            "interpret input (got 'maybe') (see 'jobsctl --help')",
        ),
    ],
)  # fmt: skip
def test_jobsctl_refuses_a_bad_setting_in_one_line(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    env: dict[str, str],
    line: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert jobsctl.run(argv) == jobsctl.EXIT_USAGE
    assert capsys.readouterr().err == line + "\n"


def test_jobsctl_no_tls_wins_over_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAN_JOBSCTL_TLS", "1")
    assert resolve(jobsctl.build_parser().parse_args(["stats"])).settings.tls
    assert not resolve(jobsctl.build_parser().parse_args(["--no-tls", "stats"])).settings.tls


def test_an_empty_variable_counts_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAN_JOBSCTL_TIMEOUT", "")
    monkeypatch.setenv("SAN_WEB_MAX_CONNECTIONS", "")
    assert jobsctl.build_parser().parse_args(["stats"]).timeout == 10.0
    assert web.build_parser().parse_args([]).max_connections == 100


@pytest.mark.parametrize(
    ("argv", "env", "line"),
    [
        (
            ["--listen", "nowhere"], {},
            "san-web: error: --listen: Value error, expected HOST:PORT with a port from 0 "
            "to 65535, got 'nowhere'",
        ),
        (
            [], {"SAN_WEB_MAX_CONNECTIONS": "lots"},
            "san-web: error: SAN_WEB_MAX_CONNECTIONS: Input should be a valid integer, "
            "unable to parse string as an integer (got 'lots')",
        ),
        (
            ["--auth", "token"], {},
            "san-web: error: --auth: Input should be 'off' or 'password' (got 'token')",
        ),
        (
            ["--log-level", "loud"], {},
            "san-web: error: --log-level: Input should be 'critical', 'error', 'warning', "
            "'info', 'debug' or 'trace' (got 'loud')",
        ),
    ],
)  # fmt: skip
def test_san_web_refuses_a_bad_setting_in_one_line(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    env: dict[str, str],
    line: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exited:
        web.main(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err == line + "\n"


def test_san_web_log_level_in_any_case() -> None:
    assert web.build_parser().parse_args(["--log-level", "DEBUG"]).log_level == "debug"
