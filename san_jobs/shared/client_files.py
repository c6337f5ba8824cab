"""What a JobService client among our programs (jobsctl, san-web's link) reads from
its flags before it connects, in one place: the TLS files (the certificate and key go
together; each file read now, so a wrong path is a one-line settings error naming its
flag, not a failed call later) and the warning for a token sent without TLS.

Before, jobsctl and san-web each had their own reader, with their own words, and only
jobsctl warned about a token crossing the network in the clear."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from san_jobs.client._channel import read_pem
from san_jobs.shared.exposure import is_loopback
from san_jobs.shared.tls_settings import tls_pair_problem


@dataclass(frozen=True, slots=True)
class ClientTlsFiles:
    """The PEM contents of --PREFIX-ca, --PREFIX-cert and --PREFIX-key (None: not given)."""

    ca: bytes | None
    cert: bytes | None
    key: bytes | None


def read_client_tls(
    prefix: str, ca: Path | None, cert: Path | None, key: Path | None
) -> ClientTlsFiles:
    """The files named by --PREFIX-ca/-cert/-key, read; ValueError in one line naming
    the flag when the certificate and key do not go together, or a file cannot be
    read or is not PEM."""
    problem = tls_pair_problem(prefix, cert, key)
    if problem:
        raise ValueError(problem)
    return ClientTlsFiles(
        _pem(ca, f"--{prefix}-ca"), _pem(cert, f"--{prefix}-cert"), _pem(key, f"--{prefix}-key")
    )


def _pem(path: Path | None, flag: str) -> bytes | None:
    if path is None:
        return None
    try:
        return read_pem(path, flag)
    except OSError as error:
        raise ValueError(f"cannot read {flag} {path}: {error.strerror}") from None


def token_in_the_clear(target: str, *, token: str | None, tls: bool, advice: str) -> str | None:
    """The warning for `token` sent to `target` without TLS, beyond this machine
    (anyone on the way reads it), or None."""
    if token is None or tls or is_loopback(target):
        return None
    return f"the token goes to {target} without TLS, readable on the way ({advice})"
