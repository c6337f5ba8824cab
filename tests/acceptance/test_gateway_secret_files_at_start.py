"""A real ai-gateway started with a TLS private key, a caller tokens file and an API key
file that other users may read says so once each, at start, naming the file and the
fix; the same files made 0600 start it without a word."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from scripts.dev_certs import write_dev_certs
from tests.support.processes import running, start_gateway

pytestmark = pytest.mark.acceptance


def gateway_files(tmp_path: Path, mode: int) -> tuple[list[str], list[Path]]:
    certs = tmp_path / "certs"
    write_dev_certs(certs)
    key = tmp_path / "ai-gateway-key.pem"
    shutil.copy(certs / "ai-gateway-key.pem", key)
    tokens = tmp_path / "callers"
    tokens.write_text("job-service " + "k" * 40 + "\n")
    api_key = tmp_path / "api-key"
    api_key.write_text("sk-" + "a" * 40 + "\n")
    for path in (key, tokens, api_key):
        path.chmod(mode)
    args = [
        *("--tls-cert", str(certs / "ai-gateway.pem"), "--tls-key", str(key)),
        *("--tls-client-ca", str(certs / "ca.pem"), "--caller-tokens-file", str(tokens)),
        *("--backend", "openai", "--openai-base-url", "http://127.0.0.1:9/v1"),
        *("--openai-api-key-file", str(api_key)),
    ]
    return args, [key, tokens, api_key]


def test_secret_files_others_may_read_are_logged_once_at_start(tmp_path: Path) -> None:
    args, (key, tokens, api_key) = gateway_files(tmp_path, 0o644)
    with running(start_gateway(tmp_path / "logs", *args)) as gateway:
        log = gateway.log()
    for what, path in (
        ("TLS private key file", key),
        ("caller tokens file", tokens),
        ("API key file", api_key),
    ):
        line = f"{what} {path} is accessible by others (mode 0644); run: chmod 600 {path}"
        assert log.count(line) == 1, log
    assert "a" * 40 not in log and "k" * 40 not in log


def test_private_secret_files_start_without_a_warning(tmp_path: Path) -> None:
    args, _ = gateway_files(tmp_path, 0o600)
    with running(start_gateway(tmp_path / "logs", *args)) as gateway:
        log = gateway.log()
    assert "accessible by others" not in log, log
