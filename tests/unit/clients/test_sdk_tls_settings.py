"""The SDK's TLS and token settings: files or bytes, what turns TLS on, what is
refused before any connection, and secrets kept out of repr()."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from san_jobs.client import AsyncJobsClient, ChannelSettings, JobsClient

PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
KEY = b"-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"


def test_plaintext_by_default() -> None:
    settings = ChannelSettings.build("127.0.0.1:1")
    assert not settings.tls
    assert settings.credentials() is None


def test_tls_alone_trusts_the_system_roots() -> None:
    settings = ChannelSettings.build("h:1", tls=True)
    assert settings.tls and settings.root_certificates is None
    assert isinstance(settings.credentials(), grpc.ChannelCredentials)


def test_a_ca_file_turns_tls_on(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_bytes(PEM)
    for source in (tmp_path / "ca.pem", str(tmp_path / "ca.pem"), PEM):
        settings = ChannelSettings.build("h:1", tls_ca=source)
        assert settings.tls
        assert settings.root_certificates == PEM


def test_a_client_certificate_turns_tls_on_and_needs_its_key(tmp_path: Path) -> None:
    settings = ChannelSettings.build("h:1", tls_cert=PEM, tls_key=KEY)
    assert settings.tls
    assert (settings.client_certificate, settings.client_key) == (PEM, KEY)
    with pytest.raises(ValueError, match="tls_cert and tls_key go together"):
        ChannelSettings.build("h:1", tls_cert=PEM)
    with pytest.raises(ValueError, match="tls_cert and tls_key go together"):
        ChannelSettings.build("h:1", tls_key=KEY)


def test_root_certificates_is_still_accepted() -> None:
    settings = ChannelSettings.build("h:1", tls=True, root_certificates=PEM)
    assert settings.root_certificates == PEM


def test_not_pem_and_missing_files_are_refused_at_once(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("not a certificate")
    with pytest.raises(ValueError, match=r"tls_ca \(.*token\) is not PEM"):
        ChannelSettings.build("h:1", tls_ca=tmp_path / "token")
    with pytest.raises(FileNotFoundError):
        ChannelSettings.build("h:1", tls_ca=tmp_path / "missing.pem")


@pytest.mark.parametrize("token", ["two words", "line\nbreak", "caf\u00e9", "tab\t"])
def test_a_token_grpc_cannot_send_is_refused(token: str) -> None:
    with pytest.raises(ValueError, match="printable ASCII"):
        ChannelSettings.build("h:1", token=token)


def test_an_empty_token_means_none() -> None:
    settings = ChannelSettings.build("h:1", token="")
    assert settings.token is None
    assert settings.call_metadata() == ()


def test_secrets_stay_out_of_repr() -> None:
    settings = ChannelSettings.build("h:1", tls_cert=PEM, tls_key=KEY, token="s3cret-token")
    assert "s3cret-token" not in repr(settings)
    assert "PRIVATE KEY" not in repr(settings)
    assert settings.call_metadata() == (("authorization", "Bearer s3cret-token"),)


def test_clients_take_the_tls_settings(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_bytes(PEM)
    client = JobsClient("127.0.0.1:1", tls_ca=tmp_path / "ca.pem", token="t")
    try:
        assert client.settings.tls and client.settings.root_certificates == PEM
    finally:
        client.close()


async def test_async_client_takes_the_tls_settings() -> None:
    client = AsyncJobsClient("127.0.0.1:1", tls_cert=PEM, tls_key=KEY, tls_ca=PEM)
    try:
        assert client.settings.tls and client.settings.client_key == KEY
    finally:
        await client.close()
