"""san-web's TLS settings: which combinations start, the exposure rule, and the
JobService link read from its files."""

from __future__ import annotations

import argparse
import ssl
from pathlib import Path

import pytest

from san_jobs.web._https import HttpsSettingsError, reload_certificate, server_tls
from san_jobs.web._job_service_link import LinkSettingsError, load_link
from san_jobs.web.cli import build_parser
from tests.acceptance.clients._certs import write_test_certs

PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
KEY = b"-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_plain_http_on_loopback_needs_nothing() -> None:
    assert server_tls(parse(), authenticated=False) is None


def test_beyond_loopback_without_tls_is_refused_unless_insecure() -> None:
    with pytest.raises(HttpsSettingsError, match=r"refusing to listen on 0.0.0.0:8000"):
        server_tls(parse("--listen", "0.0.0.0:8000"), authenticated=True)
    assert server_tls(parse("--listen", "0.0.0.0:8000", "--insecure"), authenticated=False) is None


def test_beyond_loopback_tls_without_logins_is_refused(tmp_path: Path) -> None:
    args = parse("--listen", "[::]:8443", "--tls-cert", "c.pem", "--tls-key", "k.pem")
    with pytest.raises(HttpsSettingsError, match="without authentication"):
        server_tls(args, authenticated=False)


def test_insecure_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAN_WEB_INSECURE", "true")
    assert parse().insecure
    monkeypatch.setenv("SAN_WEB_INSECURE", "0")
    assert not parse().insecure


def test_tls_flags_go_together() -> None:
    with pytest.raises(HttpsSettingsError, match="--tls-cert needs --tls-key"):
        server_tls(parse("--tls-cert", "c.pem"), authenticated=False)
    with pytest.raises(HttpsSettingsError, match="--tls-client-ca needs --tls-cert"):
        server_tls(parse("--tls-client-ca", "ca.pem"), authenticated=False)


def test_files_that_do_not_load_stop_the_start(tmp_path: Path) -> None:
    (tmp_path / "c.pem").write_bytes(PEM)
    (tmp_path / "k.pem").write_bytes(KEY)
    args = parse("--tls-cert", str(tmp_path / "c.pem"), "--tls-key", str(tmp_path / "k.pem"))
    with pytest.raises(HttpsSettingsError, match=r"--tls-cert .*c\.pem / --tls-key .*cannot use"):
        server_tls(args, authenticated=False)
    missing = parse("--tls-cert", str(tmp_path / "no.pem"), "--tls-key", str(tmp_path / "k.pem"))
    with pytest.raises(HttpsSettingsError, match="No such file"):
        server_tls(missing, authenticated=False)


def test_the_server_context_trusts_only_the_client_ca(tmp_path: Path) -> None:
    ca = write_test_certs(tmp_path / "ca")
    args = parse(
        "--tls-cert", str(ca / "san-web.pem"), "--tls-key", str(ca / "san-web-key.pem"),
        "--tls-client-ca", str(ca / "ca.pem"),
    )  # fmt: skip
    tls = server_tls(args, authenticated=False)
    assert tls is not None
    assert (tls.cert, tls.key, tls.client_ca) == (
        ca / "san-web.pem",
        ca / "san-web-key.pem",
        ca / "ca.pem",
    )
    assert tls.context.verify_mode == ssl.CERT_REQUIRED
    assert tls.context.minimum_version == ssl.TLSVersion.TLSv1_2
    # Only the CA named: not the system's (which would admit any public certificate).
    assert len(tls.context.get_ca_certs()) == 1
    assert reload_certificate(tls)
    assert len(tls.context.get_ca_certs()) == 1


def test_job_service_link_from_files(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_bytes(PEM)
    (tmp_path / "token").write_text("web-token\n")
    (tmp_path / "token").chmod(0o644)
    link = load_link(
        target="jobs.example:50051",
        tls_ca=tmp_path / "ca.pem",
        tls_cert=None,
        tls_key=None,
        token_file=tmp_path / "token",
    )
    assert (link.tls_ca, link.token) == (PEM, "web-token")
    assert "web-token" not in repr(link)
    (warning,) = link.warnings
    assert "chmod 600" in warning
    client = link.client_factory()
    assert callable(client)


def test_job_service_link_refuses_what_cannot_work(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("two words\n")
    with pytest.raises(
        LinkSettingsError, match="--job-service-tls-cert needs --job-service-tls-key"
    ):
        load_link(
            target="127.0.0.1:50051",
            tls_ca=None,
            tls_cert=tmp_path / "c.pem",
            tls_key=None,
            token_file=None,
        )
    with pytest.raises(LinkSettingsError, match=r"--job-service-token-file: .*printable ASCII"):
        load_link(
            target="127.0.0.1:50051",
            tls_ca=None,
            tls_cert=None,
            tls_key=None,
            token_file=tmp_path / "token",
        )
    with pytest.raises(LinkSettingsError, match=r"cannot read --job-service-tls-ca .*no.pem"):
        load_link(
            target="127.0.0.1:50051",
            tls_ca=tmp_path / "no.pem",
            tls_cert=None,
            tls_key=None,
            token_file=None,
        )


def test_san_webs_token_sent_without_tls_beyond_this_machine_is_warned(tmp_path: Path) -> None:
    """As jobsctl's is (one rule, shared/client_files.py): san-web said nothing."""
    (tmp_path / "token").write_text("web-token\n")
    (tmp_path / "token").chmod(0o600)

    def warnings(target: str, ca: Path | None = None) -> list[str]:
        link = load_link(
            target=target, tls_ca=ca, tls_cert=None, tls_key=None, token_file=tmp_path / "token"
        )
        return list(link.warnings)

    (warning,) = warnings("jobs.example:50051")
    assert warning == (
        "the token goes to jobs.example:50051 without TLS, readable on the way"
        " (use --job-service-tls-ca)"
    )
    assert warnings("127.0.0.1:50051") == []
    (tmp_path / "ca.pem").write_bytes(PEM)
    assert warnings("jobs.example:50051", tmp_path / "ca.pem") == []
