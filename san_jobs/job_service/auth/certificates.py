"""Client certificates as callers (mutual TLS with `--tls-client-roles NAME=ROLE`).

Mutual TLS alone (`--tls-client-ca`) admits any certificate the CA signed. With an
allow-list, only the certificates named on it are admitted: any other gets
PERMISSION_DENIED on every call but health (the TLS handshake already proved who it
is, so it is not UNAUTHENTICATED; it is known and not allowed). A certificate's name
is the one san_jobs.shared.client_identity reads (its common name, else its first subject
alternative name), as AiGateway reads it.

Under `--auth off` a listed certificate stands in for a token: its name is the
caller's identity (every job's requested_by, the key of per-caller limits) and its
role is the one the list gives it, applied through the role table (roles.py) as a
token's is. Under `--auth token` the token decides who calls and with which role; the
list then only says which certificates may connect at all (its roles are unused).
Nothing revokes a certificate here: take it off the list and restart, or revoke it
at the CA.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import grpc

from san_jobs.job_service.auth.roles import Role
from san_jobs.job_service.domain.errors import PermissionDeniedError
from san_jobs.shared.client_identity import certificate_name

# Certificate names come from the caller's certificate: keep errors short.
SHOWN_NAME_CHARS = 128


class CertificateRefusedError(PermissionDeniedError):
    """The client certificate is not on --tls-client-roles (or there is none)."""

    def __init__(self, rpc: str, name: str | None) -> None:
        shown = "without a name" if name is None else repr(name[:SHOWN_NAME_CHARS])
        # Not PermissionDeniedError's own message: no role is involved.
        Exception.__init__(self, f"client certificate {shown} is not on --tls-client-roles")
        self.rpc = rpc
        self.role = ""  # ErrorInfo metadata: the refusal is of the certificate, not a role


def caller_certificate(context: grpc.aio.ServicerContext[Any, Any]) -> str | None:
    """The name of the verified client certificate of this call, or None (no TLS, or
    no client certificate)."""
    return certificate_name(context.auth_context())


class CertificateAllowList:
    """The certificates admitted, each with the role it has when it is the caller."""

    def __init__(self, roles: Mapping[str, Role]) -> None:
        self._roles = dict(roles)

    def role_of(self, name: str | None, rpc: str) -> Role:
        """The role of certificate `name`; CertificateRefusedError for any other."""
        role = None if name is None else self._roles.get(name)
        if role is None:
            raise CertificateRefusedError(rpc, name)
        return role
