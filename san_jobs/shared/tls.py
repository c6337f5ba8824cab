"""TLS for the project's gRPC links: server credentials whose files are re-read on
request (certificate rotation without a restart) and client channel credentials.

Files are checked when the credentials are made, so a missing or unreadable file,
a file that holds no PEM certificate or key, or a key that does not belong to its
certificate is one line (TlsFileError) at startup rather than a failed handshake
on the first call.

Rotation: a server calls `request_reload()` (on SIGHUP); the next connection made
to any server credentials of this process re-reads the files, and keeps the
certificate it had when the new files are not a valid pair yet (a rotation caught
half-way: the next connection tries again).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import grpc
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from san_jobs.shared.secret_files import warn_if_shared

log = logging.getLogger("san_shared.tls")


class TlsFileError(ValueError):
    """A TLS file cannot be used; the message says which and why, in one line."""


@dataclass(frozen=True)
class ServerFiles:
    """What a server's TLS set-up is read from."""

    cert: Path
    key: Path
    client_ca: Path | None = None


def read_file(path: Path, what: str) -> bytes:
    """The bytes of `path`; TlsFileError naming `what` when it cannot be read."""
    try:
        return path.read_bytes()
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise TlsFileError(f"cannot read the {what} {str(path)!r}: {reason}") from None


def load_certificates(data: bytes, path: Path, what: str) -> list[x509.Certificate]:
    """The PEM certificates in `data` (read from `path`); TlsFileError if there are none."""
    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError:
        certificates = []
    if not certificates:
        raise TlsFileError(f"the {what} {str(path)!r} holds no PEM certificate")
    return certificates


def load_key(data: bytes, path: Path) -> PrivateKeyTypes:
    """The unencrypted PEM private key in `data`; TlsFileError if there is none."""
    try:
        return serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise TlsFileError(
            f"the private key file {str(path)!r} holds no unencrypted PEM private key"
        ) from None


def check_pair(cert: bytes, cert_path: Path, key: bytes, key_path: Path) -> None:
    """TlsFileError unless `key` is the private key of the first certificate in `cert`."""
    leaf = load_certificates(cert, cert_path, "certificate file")[0]
    private_key = load_key(key, key_path)
    public_format = serialization.PublicFormat.SubjectPublicKeyInfo
    if leaf.public_key().public_bytes(
        serialization.Encoding.DER, public_format
    ) != private_key.public_key().public_bytes(serialization.Encoding.DER, public_format):
        raise TlsFileError(
            f"the private key {str(key_path)!r} does not belong to the certificate "
            f"{str(cert_path)!r}"
        )


def read_server_configuration(files: ServerFiles) -> grpc.ServerCertificateConfiguration:
    """The files read and checked, as gRPC's certificate configuration."""
    cert = read_file(files.cert, "certificate file")
    key = read_file(files.key, "private key file")
    check_pair(cert, files.cert, key, files.key)
    client_ca: bytes | None = None
    if files.client_ca is not None:
        client_ca = read_file(files.client_ca, "client CA file")
        load_certificates(client_ca, files.client_ca, "client CA file")
    return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=client_ca)


class ReloadableServerCertificates:
    """The certificate configuration of one server, re-read after request_reload().

    gRPC calls `fetch` from its own threads before every TLS handshake; it must be
    cheap when nothing changed (a flag test under a lock) and never raise.
    """

    def __init__(self, files: ServerFiles) -> None:
        self.files = files
        self.initial = read_server_configuration(files)
        warn_if_shared(files.key, "TLS private key file")
        self._lock = threading.Lock()
        self._reload_requested = False
        self._failure_logged = False

    def request_reload(self) -> None:
        """Re-read the files before the next handshake."""
        with self._lock:
            self._reload_requested = True
            self._failure_logged = False

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """A new configuration once after a reload was asked for; None: keep the current."""
        with self._lock:
            if not self._reload_requested:
                return None
            try:
                configuration = read_server_configuration(self.files)
            except TlsFileError as error:
                # Keep serving with the current certificate and try again on the
                # next connection: the new files may be half-written.
                if not self._failure_logged:
                    log.warning("TLS files not reloaded, keeping the current ones: %s", error)
                    self._failure_logged = True
                return None
            except Exception:  # never let an error escape into gRPC's handshake
                log.exception("TLS files not reloaded, keeping the current ones")
                return None
            self._reload_requested = False
            log.info("TLS certificate reloaded from %s", self.files.cert)
            return configuration


# Every ReloadableServerCertificates made in this process, for request_reload().
_RELOADABLE: weakref.WeakSet[ReloadableServerCertificates] = weakref.WeakSet()
_RELOADABLE_LOCK = threading.Lock()


def server_credentials(
    cert: Path, key: Path, client_ca: Path | None = None
) -> grpc.ServerCredentials:
    """TLS server credentials from PEM files; with `client_ca`, mutual TLS: a client
    must show a certificate signed by that CA. The files are re-read after
    request_reload(). TlsFileError (one line) when a file cannot be used."""
    certificates = ReloadableServerCertificates(ServerFiles(cert, key, client_ca))
    with _RELOADABLE_LOCK:
        _RELOADABLE.add(certificates)
    # grpc keeps the fetcher (a bound method, so `certificates` too) alive as long
    # as the credentials; the stubs say the fetcher never returns None, gRPC says it may.
    fetcher = cast(Callable[[], grpc.ServerCertificateConfiguration], certificates.fetch)
    return grpc.dynamic_ssl_server_credentials(
        certificates.initial,
        fetcher,
        require_client_authentication=client_ca is not None,
    )


def request_reload() -> None:
    """Have every server credentials of this process re-read their files before
    their next handshake (servers call it on SIGHUP)."""
    with _RELOADABLE_LOCK:
        pending = list(_RELOADABLE)
    for certificates in pending:
        certificates.request_reload()


def channel_credentials(
    ca: Path | None = None, cert: Path | None = None, key: Path | None = None
) -> grpc.ChannelCredentials:
    """TLS client credentials: trust `ca` (None: the system's roots) and, for mutual
    TLS, present `cert` with `key`. TlsFileError (one line) when a file cannot be
    used or only one of `cert` and `key` is given."""
    if (cert is None) != (key is None):
        raise TlsFileError("a client certificate needs its private key, and a key its certificate")
    root: bytes | None = None
    if ca is not None:
        root = read_file(ca, "CA file")
        load_certificates(root, ca, "CA file")
    chain: bytes | None = None
    private_key: bytes | None = None
    if cert is not None and key is not None:
        chain = read_file(cert, "certificate file")
        private_key = read_file(key, "private key file")
        check_pair(chain, cert, private_key, key)
        warn_if_shared(key, "TLS private key file")
    return grpc.ssl_channel_credentials(
        root_certificates=root, private_key=private_key, certificate_chain=chain
    )
