"""Who is calling the gateway: the identity that keys its rate limit and concurrency
share, and the refusal of callers it does not know.

Two ways to be known, either one enough:

* mutual TLS (``--tls-client-ca``): the client certificate's subject common name
  (its first subject alternative name when it has no CN) is the identity, when it is
  one of ``--tls-client-names`` (default ``job-service``). The CA may sign others
  (``make certs`` signs the operator's and san-web's certificates with the same CA): a
  certificate it signed under another name is PERMISSION_DENIED, so that nobody
  reaches the models, and spends the API key, past JobService's limits and audit;
* a bearer token (``authorization: Bearer TOKEN``) listed in ``--caller-tokens-file``:
  the token's NAME is the identity. The file is itself the list of who may call, so
  ``--tls-client-names`` does not apply to a token: a listed token is admitted over
  any certificate.

When neither is configured (the loopback default, ``make run``) authentication is
off and the identity is the peer's address without its port. ``x-client-id`` is
never an identity: a caller could write anything there (a rotating one walked past
the rate limit); it is kept only as a label in the call record.

The tokens file: one caller per line, ``NAME TOKEN`` separated by white space; blank
lines and lines starting with ``#`` are ignored. A NAME is 1 to 64 letters, digits
or ``._@:-``; a TOKEN is at least 16 printable characters without spaces; names and
tokens are unique. The file is re-read on SIGHUP (a bad new file keeps the old list).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import grpc

from san_jobs.ai_gateway.errors import MAX_ECHO, PermissionDenied, Unauthenticated, echo
from san_jobs.shared.client_identity import (
    ClientNames,
    bearer_token,
    certificate_name,
    peer_host,
)
from san_jobs.shared.secret_files import warn_if_shared

logger = logging.getLogger("ai_gateway.callers")

MIN_TOKEN_CHARS = 16
MAX_TOKENS_FILE_BYTES = 1024 * 1024
_NAME = re.compile(r"[A-Za-z0-9._@:-]{1,64}")
_TOKEN = re.compile(r"[\x21-\x7e]+")  # printable ASCII, no space: fits a header value
DEFAULT_CLIENT_NAMES = ClientNames(frozenset({"job-service"}))
"""JobService's certificate name as ``make certs`` (scripts/dev_certs.py) writes it."""

Metadata = grpc.aio.Metadata | Iterable[tuple[str, str | bytes]]


class CallerTokensError(ValueError):
    """The tokens file cannot be used; the message says where and why, in one line."""


@dataclass(frozen=True)
class _Caller:
    name: str
    digest: bytes  # SHA-256 of the token: every comparison is over 32 bytes


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def read_caller_tokens(path: Path) -> tuple[_Caller, ...]:
    """The callers listed in ``path``; CallerTokensError (one line) when it is
    unreadable, malformed, or lists nobody."""
    try:
        with path.open("rb") as file:
            data = file.read(MAX_TOKENS_FILE_BYTES + 1)
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else type(err).__name__
        raise CallerTokensError(
            f"cannot read the caller tokens file {str(path)!r}: {reason}"
        ) from None
    if len(data) > MAX_TOKENS_FILE_BYTES:
        raise CallerTokensError(f"the caller tokens file {str(path)!r} is larger than 1 MiB")
    callers: list[_Caller] = []
    names: set[str] = set()
    digests: set[bytes] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        # The token itself never appears in a message: the file may be shown in a log.
        where = f"{str(path)!r} line {number}"
        parts = line.split()
        if len(parts) != 2:
            raise CallerTokensError(f"{where}: expected NAME TOKEN")
        name, token = parts
        if not _NAME.fullmatch(name):
            raise CallerTokensError(f"{where}: a NAME is 1 to 64 of A-Z a-z 0-9 . _ @ : -")
        if len(token) < MIN_TOKEN_CHARS or not _TOKEN.fullmatch(token):
            raise CallerTokensError(
                f"{where}: the token of {name!r} must be at least {MIN_TOKEN_CHARS} "
                "printable ASCII characters"
            )
        digest = _digest(token)
        if name in names or digest in digests:
            raise CallerTokensError(f"{where}: {name!r} or its token is listed twice")
        names.add(name)
        digests.add(digest)
        callers.append(_Caller(name, digest))
    if not callers:
        raise CallerTokensError(f"the caller tokens file {str(path)!r} lists no caller")
    return tuple(callers)


class CallerTokens:
    """The callers of ``--caller-tokens-file``; :meth:`reload` re-reads it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._callers = read_caller_tokens(path)
        warn_if_shared(path, "caller tokens file")

    def __len__(self) -> int:
        return len(self._callers)

    def reload(self) -> bool:
        """Re-read the file; on a problem keep the current list (logged). True if read."""
        try:
            self._callers = read_caller_tokens(self.path)
        except CallerTokensError as err:
            logger.error("caller tokens not reloaded, keeping the current ones: %s", err)
            return False
        logger.info("caller tokens reloaded from %s: %d callers", self.path, len(self._callers))
        return True

    def name_of(self, token: str) -> str | None:
        """The NAME whose token is ``token``, or None. Every entry is compared, each in
        constant time, so the time taken says nothing about how close a guess was."""
        digest = _digest(token)
        found: str | None = None
        for caller in self._callers:
            if hmac.compare_digest(caller.digest, digest) and found is None:
                found = caller.name
        return found


class Authenticator:
    """Turns a call's credentials into the caller's identity, or refuses the call."""

    def __init__(
        self,
        tokens: CallerTokens | None = None,
        client_certificates: bool = False,
        client_names: ClientNames = DEFAULT_CLIENT_NAMES,
    ):
        """``tokens``: the callers of --caller-tokens-file; ``client_certificates``: the
        server requires client certificates (mutual TLS), of which those named in
        ``client_names`` are admitted. Neither: authentication off."""
        self.tokens = tokens
        self.client_certificates = client_certificates
        self.client_names = client_names

    @property
    def enabled(self) -> bool:
        """Whether calls must be authenticated."""
        return self.tokens is not None or self.client_certificates

    def identify(self, context: grpc.aio.ServicerContext[object, object]) -> str:
        """The caller's identity; raises :class:`Unauthenticated` when auth is on and
        the call carries no known credential."""
        if not self.enabled:
            return peer_host(context.peer())
        header = bearer_token(context.invocation_metadata() or ())
        if header is not None and self.tokens is not None:
            # A token shown is checked even under mutual TLS: a wrong one is refused.
            name = self.tokens.name_of(header)
            if name is None:
                raise Unauthenticated("the bearer token is not one of the gateway's callers")
            return name
        if self.client_certificates:
            name = certificate_name(context.auth_context())
            if name is not None:
                if not self.client_names.admits(name):
                    raise self._not_admitted(name)
                return name
        wanted = " or ".join(
            what
            for what, on in (
                ("a client certificate", self.client_certificates),
                ("an 'authorization: Bearer' token", self.tokens is not None),
            )
            if on
        )
        raise Unauthenticated(f"the AI gateway needs {wanted}")

    def _not_admitted(self, name: str) -> PermissionDenied:
        token = " (or a caller token)" if self.tokens is not None else ""
        return PermissionDenied(
            f"the client certificate {echo(name)} is not one the AI gateway admits{token}",
            metadata={"certificateName": name[:MAX_ECHO]},
        )
