"""san_jobs.shared.tls (files checked in one line, reload on request) and the development
certificates of `make certs` (scripts/dev_certs.py)."""

from __future__ import annotations

import ipaddress
import shutil
import stat
from pathlib import Path

import pytest
from cryptography import x509

from san_jobs.shared import tls
from san_jobs.shared.tls_settings import tls_pair_problem
from scripts import dev_certs
from scripts.dev_certs import write_dev_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("certs")
    write_dev_certs(folder)
    return folder


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_dev_certs_are_signed_by_the_ca_and_their_keys_private(certs: Path) -> None:
    assert sorted(p.name for p in certs.iterdir()) == sorted(dev_certs.expected_files())
    ca = load(certs / "ca.pem")
    for name in ("job-service", "ai-gateway", "san-web", "operator"):
        cert = load(certs / f"{name}.pem")
        cert.verify_directly_issued_by(ca)
        assert stat.S_IMODE((certs / f"{name}-key.pem").stat().st_mode) == 0o600
        tls.check_pair(
            (certs / f"{name}.pem").read_bytes(),
            certs / f"{name}.pem",
            (certs / f"{name}-key.pem").read_bytes(),
            certs / f"{name}-key.pem",
        )
    names = load(certs / "ai-gateway.pem").extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert names.value.get_values_for_type(x509.DNSName) == ["localhost"]
    assert set(names.value.get_values_for_type(x509.IPAddress)) == {
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    }


def test_make_certs_keeps_existing_files_unless_forced(tmp_path: Path) -> None:
    dev_certs.main(["--out", str(tmp_path)])
    first = (tmp_path / "ca.pem").read_bytes()
    dev_certs.main(["--out", str(tmp_path)])
    assert (tmp_path / "ca.pem").read_bytes() == first
    dev_certs.main(["--out", str(tmp_path), "--force"])
    assert (tmp_path / "ca.pem").read_bytes() != first


@pytest.mark.parametrize(
    ("cert", "key", "client_ca", "message"),
    [
        ("missing.pem", "job-service-key.pem", None, "cannot read the certificate file"),
        ("job-service.pem", "missing.pem", None, "cannot read the private key file"),
        ("job-service-key.pem", "job-service-key.pem", None, "holds no PEM certificate"),
        ("job-service.pem", "job-service.pem", None, "holds no unencrypted PEM private key"),
        ("job-service.pem", "operator-key.pem", None, "does not belong to the certificate"),
        ("job-service.pem", "job-service-key.pem", "operator-key.pem", "client CA file"),
    ],
)
def test_unusable_server_files_are_one_line(
    certs: Path, cert: str, key: str, client_ca: str | None, message: str
) -> None:
    with pytest.raises(tls.TlsFileError) as caught:
        tls.server_credentials(certs / cert, certs / key, certs / client_ca if client_ca else None)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_client_certificate_needs_its_key(certs: Path) -> None:
    with pytest.raises(tls.TlsFileError, match="needs its private key"):
        tls.channel_credentials(certs / "ca.pem", certs / "operator.pem", None)
    assert tls.channel_credentials(certs / "ca.pem") is not None
    both = tls.channel_credentials(
        certs / "ca.pem", certs / "operator.pem", certs / "operator-key.pem"
    )
    assert both is not None


def test_files_are_re_read_only_after_a_reload_and_only_once_valid(
    certs: Path, tmp_path: Path
) -> None:
    for suffix in (".pem", "-key.pem"):
        shutil.copy(certs / f"job-service{suffix}", tmp_path / f"server{suffix}")
    source = tls.ReloadableServerCertificates(
        tls.ServerFiles(tmp_path / "server.pem", tmp_path / "server-key.pem")
    )
    assert source.fetch() is None  # nothing asked: the current certificate stays
    # A rotation caught half-way: the new certificate, the old key.
    shutil.copy(certs / "san-web.pem", tmp_path / "server.pem")
    source.request_reload()
    assert source.fetch() is None  # an invalid pair is not taken...
    shutil.copy(certs / "san-web-key.pem", tmp_path / "server-key.pem")
    assert source.fetch() is not None  # ...and the next connection tries again
    assert source.fetch() is None  # once


@pytest.mark.parametrize(
    ("cert", "key", "client_ca", "problem"),
    [
        (None, None, None, None),
        ("c", "k", "ca", None),
        ("c", None, None, "--tls-cert needs --tls-key"),
        (None, "k", None, "--tls-key needs --tls-cert"),
        (None, None, "ca", "--tls-client-ca needs --tls-cert"),
    ],
)
def test_tls_flags_go_in_pairs(
    cert: str | None, key: str | None, client_ca: str | None, problem: str | None
) -> None:
    found = tls_pair_problem(
        "tls",
        Path(cert) if cert else None,
        Path(key) if key else None,
        Path(client_ca) if client_ca else None,
    )
    assert found == problem if problem is None else (found or "").startswith(problem)
