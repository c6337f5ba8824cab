"""Test certificates for the clients' TLS tests: the project's own development set
(``scripts/dev_certs.py``: ``ca.pem``, ``job-service.pem``/``-key.pem``,
``san-web.pem``/``-key.pem``, ``operator.pem``/``-key.pem``, valid for localhost,
127.0.0.1 and ::1), plus ``other-ca.pem``, a CA that signed none of them (for "wrong
CA" tests)."""

from __future__ import annotations

from pathlib import Path

from scripts.dev_certs import cert_pem, make_authority, write_dev_certs


def write_test_certs(folder: Path) -> Path:
    """Write the certificates into ``folder`` and return it."""
    folder.mkdir(parents=True, exist_ok=True)
    write_dev_certs(folder)
    other = make_authority("a CA nobody trusts")
    (folder / "other-ca.pem").write_bytes(cert_pem(other.cert))
    return folder
