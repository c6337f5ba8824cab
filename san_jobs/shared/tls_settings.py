"""Checks of TLS settings that need no file read (the files are checked at start by
san_jobs.shared.tls): kept apart so that reading settings imports neither grpc nor
cryptography."""

from __future__ import annotations

from pathlib import Path


def tls_pair_problem(
    prefix: str, cert: Path | None, key: Path | None, client_ca: Path | None = None
) -> str | None:
    """Why the flags --PREFIX-cert, --PREFIX-key (and --PREFIX-client-ca) do not go
    together, in one line, or None: a certificate needs its key and a key its
    certificate; requiring client certificates needs TLS."""
    if cert is not None and key is None:
        return f"--{prefix}-cert needs --{prefix}-key (the certificate's private key)"
    if key is not None and cert is None:
        return f"--{prefix}-key needs --{prefix}-cert (the key's certificate)"
    if client_ca is not None and cert is None:
        return f"--{prefix}-client-ca needs --{prefix}-cert and --{prefix}-key (mutual TLS is TLS)"
    return None
