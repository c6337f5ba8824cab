"""A file holding a secret that other users may read is said once, at start, in one
line naming the file and the fix (`chmod 600`), wherever such a file is read: TLS
private keys (the services' and the clients'), the gateway's caller tokens and API key
files, JobService's gateway token file, the clients' token files. A 0600 file is read
without a word."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from san_jobs.ai_gateway.callers import CallerTokens
from san_jobs.ai_gateway.settings import GatewaySettings
from san_jobs.job_service.settings import JobServiceSettings
from san_jobs.jobsctl._connection import resolve
from san_jobs.jobsctl.cli import build_parser
from san_jobs.shared.tls import channel_credentials, server_credentials
from san_jobs.shared.token_files import token_file_warning
from san_jobs.web._job_service_link import load_link
from scripts.dev_certs import write_dev_certs

TOKEN = "t" * 40


# Each test reads files of its own (tmp_path): the once-per-file memory of one test
# never hides another's warning.


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("certs")
    write_dev_certs(folder)
    return folder


def warnings_about(caplog: pytest.LogCaptureFixture, path: Path) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and str(path) in r.getMessage()
    ]


def read_server_key(certs: Path, key: Path) -> None:
    server_credentials(certs / "ai-gateway.pem", key)


def read_client_key(certs: Path, key: Path) -> None:
    channel_credentials(certs / "ca.pem", certs / "job-service.pem", key)


@pytest.mark.parametrize("read", [read_server_key, read_client_key], ids=["server", "client"])
@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o600, 0o400])
def test_a_tls_private_key_others_may_read_is_logged(
    certs: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    read: Callable[[Path, Path], None],
    mode: int,
) -> None:
    key = tmp_path / "key.pem"
    key.write_bytes(
        (
            certs / ("ai-gateway-key.pem" if read is read_server_key else "job-service-key.pem")
        ).read_bytes()
    )
    key.chmod(mode)
    read(certs, key)
    read(certs, key)  # read again (a reload, another link): still one line
    said = warnings_about(caplog, key)
    if mode & 0o077:
        assert said == [
            f"TLS private key file {key} is accessible by others (mode {mode:04o}); "
            f"run: chmod 600 {key}"
        ]
    else:
        assert said == []


def secret_file(tmp_path: Path, text: str, mode: int) -> Path:
    path = tmp_path / "secret"
    path.write_text(text)
    path.chmod(mode)
    return path


def read_caller_tokens_file(path: Path) -> None:
    CallerTokens(path)


def read_api_key_file(path: Path) -> None:
    assert GatewaySettings(backend="openai", openai_api_key_file=path).api_key()


def read_gateway_token_file(path: Path) -> None:
    assert JobServiceSettings(gateway_token_file=path).gateway_token() == TOKEN


@pytest.mark.parametrize(
    ("read", "what", "text"),
    [
        (read_caller_tokens_file, "caller tokens file", f"job-service {TOKEN}\n"),
        (read_api_key_file, "API key file", "sk-" + TOKEN + "\n"),
        (read_gateway_token_file, "gateway token file", TOKEN + "\n"),
    ],
    ids=["gateway-caller-tokens", "gateway-api-key", "job-service-gateway-token"],
)
@pytest.mark.parametrize("mode", [0o644, 0o600])
def test_a_token_or_key_file_others_may_read_is_logged(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    read: Callable[[Path], None],
    what: str,
    text: str,
    mode: int,
) -> None:
    path = secret_file(tmp_path, text, mode)
    read(path)
    said = warnings_about(caplog, path)
    if mode == 0o600:
        assert said == []
    else:
        assert said == [f"{what} {path} is accessible by others (mode 0644); run: chmod 600 {path}"]
    assert TOKEN not in caplog.text  # the warning names the file, never what it holds


def test_the_clients_token_file_warning_reads_the_same(tmp_path: Path) -> None:
    path = secret_file(tmp_path, TOKEN, 0o644)
    assert token_file_warning(path) == (
        f"token file {path} is accessible by others (mode 0644); run: chmod 600 {path}"
    )
    path.chmod(0o600)
    assert token_file_warning(path) is None


@pytest.mark.parametrize("mode", [0o644, 0o600])
def test_the_clients_tls_private_keys_are_warned_about(
    certs: Path, tmp_path: Path, mode: int
) -> None:
    key = tmp_path / "operator-key.pem"
    key.write_bytes((certs / "operator-key.pem").read_bytes())
    key.chmod(mode)
    cert = certs / "operator.pem"
    argv = ["--tls-ca", str(certs / "ca.pem"), "--tls-cert", str(cert), "--tls-key", str(key)]
    jobsctl = resolve(build_parser().parse_args([*argv, "stats"])).warnings
    web = list(
        load_link(
            target="127.0.0.1:50051", tls_ca=None, tls_cert=cert, tls_key=key, token_file=None
        ).warnings
    )
    expected = (
        [f"TLS private key file {key} is accessible by others (mode 0644); run: chmod 600 {key}"]
        if mode == 0o644
        else []
    )
    assert jobsctl == web == expected
