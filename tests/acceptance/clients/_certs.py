"""Test certificates for the clients' TLS tests.

The project's own generator (``scripts/dev_certs.py``: ``write_dev_certs(folder)``) is
used when it is there; until then an equivalent built here with ``cryptography`` writes
the same files: ``ca.pem``, ``job-service.pem``/``-key.pem``, ``san-web.pem``/``-key.pem``,
``operator.pem``/``-key.pem`` (server certificates valid for localhost, 127.0.0.1, ::1),
plus ``other-ca.pem``, a CA that signed none of them (for "wrong CA" tests).
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_SERVER_NAMES: list[x509.GeneralName] = [
    x509.DNSName("localhost"),
    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    x509.IPAddress(ipaddress.ip_address("::1")),
]


_CA_KEY_USAGE = x509.KeyUsage(
    digital_signature=True,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    key_cert_sign=True,
    crl_sign=True,
    encipher_only=False,
    decipher_only=False,
)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _ca(common_name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_CA_KEY_USAGE, critical=True)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _leaf(
    ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate, common_name: str
) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName(_SERVER_NAMES), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def write_test_certs(folder: Path) -> Path:
    """Write the certificates into ``folder`` and return it."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        from scripts.dev_certs import write_dev_certs  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        ca_key, ca_cert = _ca("san-jobs test CA")
        (folder / "ca.pem").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
        for name in ("job-service", "ai-gateway", "san-web", "operator"):
            cert_pem, key_pem = _leaf(ca_key, ca_cert, name)
            (folder / f"{name}.pem").write_bytes(cert_pem)
            (folder / f"{name}-key.pem").write_bytes(key_pem)
            (folder / f"{name}-key.pem").chmod(0o600)
    else:
        write_dev_certs(folder)
    _, other_ca = _ca("a CA nobody trusts")
    (folder / "other-ca.pem").write_bytes(other_ca.public_bytes(serialization.Encoding.PEM))
    return folder
