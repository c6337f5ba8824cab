"""san-web over HTTPS: what the ``--tls-cert/--tls-key/--tls-client-ca`` and
``--insecure`` settings mean under the secure-by-default rule of
``san_jobs.shared.exposure``, the server context they make (handed to san-web's own HTTP
protocol, which runs the handshake under a deadline: :mod:`san_jobs.web._protocol`),
and the certificate re-read on SIGHUP (rotation without a restart)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import ssl
from dataclasses import dataclass
from pathlib import Path

from san_jobs.shared.exposure import exposure_problem
from san_jobs.shared.tls_settings import tls_pair_problem

log = logging.getLogger("san_web.https")


class HttpsSettingsError(Exception):
    """A TLS or exposure setting that stops the start (one line, names the flag)."""


@dataclass(frozen=True)
class ServerTls:
    """The certificate files and the live server context made from them."""

    cert: Path
    key: Path
    client_ca: Path | None
    context: ssl.SSLContext


def _check_loads(cert: Path, key: Path, client_ca: Path | None) -> ssl.SSLContext:
    """A server context from the files, or a one-line error saying which is wrong.

    A bare server context (TLS 1.2 at least, Python's defaults), not
    ``create_default_context(CLIENT_AUTH)``: that one also trusts the system's CAs,
    which would admit any publicly issued client certificate under --tls-client-ca."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as error:
        raise HttpsSettingsError(
            f"--tls-cert {cert} / --tls-key {key}: cannot use them ({_reason(error)})"
        ) from None
    if client_ca is not None:
        try:
            context.load_verify_locations(client_ca)
        except (OSError, ssl.SSLError) as error:
            raise HttpsSettingsError(
                f"--tls-client-ca {client_ca}: cannot use it ({_reason(error)})"
            ) from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def _reason(error: OSError) -> str:
    """The short cause: "No such file or directory", "KEY_VALUES_MISMATCH", ..."""
    if isinstance(error, ssl.SSLError) and error.reason:
        return str(error.reason)
    return str(error.strerror or error)


def server_tls(args: argparse.Namespace, *, authenticated: bool) -> ServerTls | None:
    """The HTTPS settings (None for plain HTTP), after checking the files load and
    that san-web may listen where ``--listen`` says."""
    cert, key, client_ca = args.tls_cert, args.tls_key, args.tls_client_ca
    pair = tls_pair_problem("tls", cert, key, client_ca)
    if pair:
        raise HttpsSettingsError(pair)
    problem = exposure_problem(
        args.listen, tls=cert is not None, authenticated=authenticated, insecure=args.insecure
    )
    if problem:
        raise HttpsSettingsError(problem)
    if cert is None:
        return None
    return ServerTls(cert, key, client_ca, _check_loads(cert, key, client_ca))


def reload_certificate(tls: ServerTls) -> bool:
    """Load the certificate and key files again into the live server context, for the
    connections that come next; True when they were. A pair that does not load (a
    half-written file, a key of another certificate) leaves the old one serving: it is
    tried on a throwaway context first, because a failed load into the live one could
    leave the new certificate beside the old key."""
    try:
        _check_loads(tls.cert, tls.key, tls.client_ca)
    except HttpsSettingsError as error:
        log.warning("SIGHUP: keeping the current certificate: %s", error)
        return False
    tls.context.load_cert_chain(tls.cert, tls.key)
    if tls.client_ca is not None:
        tls.context.load_verify_locations(tls.client_ca)  # adds; CAs trusted before stay
    log.warning("SIGHUP: certificate reloaded from %s", tls.cert)
    return True


def reload_on_sighup(tls: ServerTls | None) -> None:
    """Re-read the certificate files on SIGHUP (call from the running server)."""
    if tls is None:
        return
    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reload_certificate, tls)
