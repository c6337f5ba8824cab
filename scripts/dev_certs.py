"""`make certs`: a development certificate authority and certificates for every
part of san-jobs, in var/certs/ (or the folder given).

    ca.pem                                  the CA every part trusts (its key: ca-key.pem)
    job-service.pem, job-service-key.pem    server (and client of the gateway)
    ai-gateway.pem, ai-gateway-key.pem      server
    san-web.pem, san-web-key.pem            server (and client of job-service)
    operator.pem, operator-key.pem          a client: jobsctl of an operator

Server certificates are valid for localhost, 127.0.0.1 and ::1, and also serve as
client certificates (mutual TLS between the services). For development and tests
only: a real deployment gets its certificates from its own CA.

Existing files are kept unless --force: a running service keeps trusting them.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FOLDER = ROOT / "var" / "certs"
SERVER_NAMES = ("job-service", "ai-gateway", "san-web")
CLIENT_NAMES = ("operator",)
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
CA_DAYS = 3650
LEAF_DAYS = 397  # the longest a public CA may issue today: the habit worth keeping


@dataclass(frozen=True)
class Authority:
    """A CA: its certificate and the key that signs with it."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "san-jobs development"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _now() -> datetime.datetime:
    # A minute back: a clock a little behind this one still accepts the certificate.
    return datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=1)


def make_authority(common_name: str = "san-jobs development CA") -> Authority:
    """A new self-signed CA (EC P-256) that may sign certificates, not other CAs."""
    key = ec.generate_private_key(ec.SECP256R1())
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now())
        .not_valid_after(_now() + datetime.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Authority(cert, key)


def issue(
    authority: Authority, common_name: str, *, server: bool
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A certificate and key signed by `authority` for a client, and with `server`
    also for a server on this machine (localhost, 127.0.0.1, ::1)."""
    key = ec.generate_private_key(ec.SECP256R1())
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(authority.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now())
        .not_valid_after(_now() + datetime.timedelta(days=LEAF_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(authority.key.public_key()),
            critical=False,
        )
    )
    if server:
        usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost")]
                + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in LOCAL_HOSTS[1:]]
            ),
            critical=False,
        )
    cert = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False).sign(
        authority.key, hashes.SHA256()
    )
    return cert, key


def cert_pem(cert: x509.Certificate) -> bytes:
    """`cert` as PEM."""
    return cert.public_bytes(serialization.Encoding.PEM)


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    """`key` as unencrypted PKCS#8 PEM (what gRPC reads)."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def write_private(path: Path, data: bytes) -> None:
    """Write `data` to `path`, readable by its owner only from the first byte on."""
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)


def write_pair(
    folder: Path, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> None:
    """NAME.pem and NAME-key.pem in `folder`."""
    (folder / f"{name}.pem").write_bytes(cert_pem(cert))
    write_private(folder / f"{name}-key.pem", key_pem(key))


def write_dev_certs(folder: Path) -> None:
    """A new CA (ca.pem, ca-key.pem) and a certificate and key for each part of
    san-jobs (see the module docstring) in `folder`, replacing what is there."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    authority = make_authority()
    write_pair(folder, "ca", authority.cert, authority.key)
    for name in SERVER_NAMES:
        write_pair(folder, name, *issue(authority, name, server=True))
    for name in CLIENT_NAMES:
        write_pair(folder, name, *issue(authority, name, server=False))


def expected_files() -> list[str]:
    """The names write_dev_certs writes."""
    names = ["ca", *SERVER_NAMES, *CLIENT_NAMES]
    return [f"{name}{suffix}" for name in names for suffix in (".pem", "-key.pem")]


def main(argv: Sequence[str] | None = None) -> None:
    """`python scripts/dev_certs.py [--out FOLDER] [--force]`."""
    parser = argparse.ArgumentParser(prog="dev_certs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_FOLDER, help="default var/certs")
    parser.add_argument("--force", action="store_true", help="replace existing certificates")
    args = parser.parse_args(argv)
    folder: Path = args.out
    if not args.force and all((folder / name).exists() for name in expected_files()):
        print(f"{folder}: development certificates already there (--force to replace)")
        return
    write_dev_certs(folder)
    print(f"{folder}: development CA and certificates written ({', '.join(expected_files())})")


if __name__ == "__main__":
    main()
