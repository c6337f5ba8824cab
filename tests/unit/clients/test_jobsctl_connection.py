"""jobsctl's connection settings: flags over environment, the token file, TLS files,
and the one-line advice for each way a TLS connection fails."""

from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

import grpc
import pytest

from san_jobs.client import ChannelSettings, ServiceUnavailableError
from san_jobs.jobsctl._connection import SettingsError, resolve, unavailable_message
from san_jobs.jobsctl.cli import build_parser

PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
KEY = b"-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"


@pytest.fixture(autouse=True)
def _no_jobsctl_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("SAN_JOBSCTL_"):
            monkeypatch.delenv(name)


def settings_of(*argv: str, env: dict[str, str] | None = None) -> ChannelSettings:
    # The parser reads the variables, as jobsctl does: set them only while it parses.
    with mock.patch.dict(os.environ, env or {}):
        return resolve(build_parser().parse_args([*argv, "stats"])).settings


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "ca.pem").write_bytes(PEM)
    (tmp_path / "cert.pem").write_bytes(PEM)
    (tmp_path / "key.pem").write_bytes(KEY)
    for name, token in (("flag.token", "from-flag-file\n"), ("env.token", "from-env-file\r\n")):
        (tmp_path / name).write_text(token)
        (tmp_path / name).chmod(0o600)
    return tmp_path


def test_no_token_and_plaintext_by_default() -> None:
    settings = settings_of()
    assert settings.token is None and not settings.tls


def test_token_sources_and_their_precedence(files: Path) -> None:
    env = {"SAN_JOBSCTL_TOKEN": "from-env"}
    env_file = {"SAN_JOBSCTL_TOKEN_FILE": str(files / "env.token")}
    assert settings_of("--token", "from-flag", env=env).token == "from-flag"
    assert settings_of(env=env).token == "from-env"
    assert settings_of(env=env_file).token == "from-env-file"  # CRLF stripped too
    assert settings_of("--token-file", str(files / "flag.token"), env=env).token == (
        "from-flag-file"
    )
    assert settings_of("--token", "from-flag", env=env_file).token == "from-flag"
    with pytest.raises(SettingsError, match="--token and --token-file both give a token"):
        settings_of("--token", "a", "--token-file", str(files / "flag.token"))
    with pytest.raises(SettingsError, match="SAN_JOBSCTL_TOKEN and SAN_JOBSCTL_TOKEN_FILE"):
        settings_of(env=env | env_file)


def test_a_token_with_a_space_inside_or_none_at_all_is_refused(files: Path) -> None:
    (files / "spaced.token").write_text(" tok en\n\n")
    with pytest.raises(SettingsError, match="printable ASCII"):
        settings_of("--token-file", str(files / "spaced.token"))
    (files / "empty.token").write_text("\n")
    with pytest.raises(SettingsError, match="is empty"):
        settings_of("--token-file", str(files / "empty.token"))


def test_a_token_file_open_to_others_warns_like_ssh(files: Path) -> None:
    path = files / "flag.token"
    args = build_parser().parse_args(["--token-file", str(path), "stats"])
    assert resolve(args).warnings == []
    path.chmod(0o640)
    (warning,) = resolve(args).warnings
    assert (
        warning == f"token file {path} is accessible by others (mode 0640); run: chmod 600 {path}"
    )


def test_a_token_sent_in_plaintext_beyond_loopback_warns() -> None:
    args = build_parser().parse_args(["--target", "10.1.2.3:50051", "--token", "t", "stats"])
    (warning,) = resolve(args).warnings
    assert "without TLS" in warning
    loopback = build_parser().parse_args(["--token", "t", "stats"])
    assert resolve(loopback).warnings == []


def test_tls_files_from_flags_and_environment(files: Path) -> None:
    settings = settings_of(
        "--tls-ca", str(files / "ca.pem"),
        "--tls-cert", str(files / "cert.pem"), "--tls-key", str(files / "key.pem"),
    )  # fmt: skip
    assert settings.tls
    assert (settings.root_certificates, settings.client_certificate) == (PEM, PEM)
    assert settings.client_key == KEY
    env = {
        "SAN_JOBSCTL_TLS_CA": str(files / "ca.pem"),
        "SAN_JOBSCTL_TLS_CERT": str(files / "cert.pem"),
        "SAN_JOBSCTL_TLS_KEY": str(files / "key.pem"),
    }
    from_env = settings_of(env=env)
    assert from_env.tls and from_env.client_key == KEY
    assert settings_of("--tls-ca", str(files / "cert.pem"), env=env).root_certificates == PEM


def test_tls_flag_and_variable_still_mean_system_roots() -> None:
    assert settings_of("--tls").tls
    assert settings_of(env={"SAN_JOBSCTL_TLS": "1"}).tls
    assert settings_of("--tls").root_certificates is None


def test_unusable_tls_files(files: Path) -> None:
    with pytest.raises(SettingsError, match=r"cannot read --tls-ca .*missing.pem: No such file"):
        settings_of("--tls-ca", str(files / "missing.pem"))
    with pytest.raises(SettingsError, match="--tls-cert needs --tls-key"):
        settings_of("--tls-cert", str(files / "cert.pem"))
    with pytest.raises(SettingsError, match=r"--tls-key .* is not PEM"):
        settings_of("--tls-cert", str(files / "cert.pem"), "--tls-key", str(files / "env.token"))


def _unavailable(details: str) -> ServiceUnavailableError:
    return ServiceUnavailableError(details, code=grpc.StatusCode.UNAVAILABLE)


PREFIX = "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:5: "


@pytest.mark.parametrize(
    ("details", "settings", "expected"),
    [
        (
            PREFIX + "Tls handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: "
            "error:100000f7:SSL routines:OPENSSL_internal:WRONG_VERSION_NUMBER",
            ChannelSettings(target="h:5", tls=True),
            "does not speak TLS (drop --tls/--tls-ca",
        ),
        (
            PREFIX + "Tls handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: "
            "error:1000007d:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED",
            ChannelSettings(target="h:5", tls=True, root_certificates=PEM),
            "not signed by the CA in --tls-ca",
        ),
        (
            PREFIX + "Failed to create security handshaker.",
            ChannelSettings(target="h:5", tls=True, client_certificate=PEM, client_key=KEY),
            "check that --tls-cert and --tls-key belong together",
        ),
        (
            PREFIX + "Socket closed",
            ChannelSettings(target="h:5"),
            "if it serves TLS, add --tls-ca",
        ),
        (
            PREFIX + "Socket closed",
            ChannelSettings(target="h:5", tls=True),
            "give --tls-cert and --tls-key",
        ),
        (
            PREFIX + "Connection refused",
            ChannelSettings(target="h:5"),
            "Connection refused",
        ),
    ],
)
def test_unavailable_message_says_what_to_try(
    details: str, settings: ChannelSettings, expected: str
) -> None:
    message = unavailable_message(_unavailable(details), settings)
    assert message.startswith("cannot reach JobService at h:5: ")
    assert expected in message
