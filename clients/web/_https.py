"""san-web over HTTPS: what the ``--tls-cert/--tls-key/--tls-client-ca`` and
``--insecure`` settings mean under the secure-by-default rule of
``san_shared.exposure``, and the certificate re-read on SIGHUP (rotation without a
restart)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import ssl
from pathlib import Path
from typing import Any

import uvicorn

from san_shared.exposure import exposure_problem

log = logging.getLogger("san_web.https")


class HttpsSettingsError(Exception):
    """A TLS or exposure setting that stops the start (one line, names the flag)."""


def _check_loads(cert: Path, key: Path, client_ca: Path | None) -> ssl.SSLContext:
    """A server context from the files, or a one-line error saying which is wrong."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
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
    return context


def _reason(error: OSError) -> str:
    """The short cause: "No such file or directory", "KEY_VALUES_MISMATCH", ..."""
    if isinstance(error, ssl.SSLError) and error.reason:
        return str(error.reason)
    return str(error.strerror or error)


def ssl_options(args: argparse.Namespace, *, authenticated: bool) -> dict[str, Any]:
    """uvicorn.Config's TLS keyword arguments (none for plain HTTP), after checking
    the files load and that san-web may listen where ``--listen`` says."""
    cert, key, client_ca = args.tls_cert, args.tls_key, args.tls_client_ca
    if (cert is None) != (key is None):
        raise HttpsSettingsError("--tls-cert and --tls-key go together")
    if client_ca is not None and cert is None:
        raise HttpsSettingsError("--tls-client-ca needs --tls-cert and --tls-key")
    problem = exposure_problem(
        args.listen, tls=cert is not None, authenticated=authenticated, insecure=args.insecure
    )
    if problem:
        raise HttpsSettingsError(problem)
    if cert is None:
        return {}
    _check_loads(cert, key, client_ca)
    options: dict[str, Any] = {"ssl_certfile": str(cert), "ssl_keyfile": str(key)}
    if client_ca is not None:
        options |= {"ssl_ca_certs": str(client_ca), "ssl_cert_reqs": ssl.CERT_REQUIRED}
    return options


def reload_certificate(config: uvicorn.Config) -> bool:
    """Load the certificate and key files again into the live server context, for the
    connections that come next; True when they were. A pair that does not load (a
    half-written file, a key of another certificate) leaves the old one serving: it is
    tried on a throwaway context first, because a failed load into the live one could
    leave the new certificate beside the old key."""
    context = config.ssl
    if context is None or not config.ssl_certfile:
        return False
    cert, key = Path(str(config.ssl_certfile)), Path(str(config.ssl_keyfile))
    client_ca = Path(config.ssl_ca_certs) if config.ssl_ca_certs else None
    try:
        _check_loads(cert, key, client_ca)
    except HttpsSettingsError as error:
        log.warning("SIGHUP: keeping the current certificate: %s", error)
        return False
    context.load_cert_chain(cert, key)
    if client_ca is not None:
        context.load_verify_locations(client_ca)  # adds; CAs trusted before stay trusted
    log.warning("SIGHUP: certificate reloaded from %s", cert)
    return True


def reload_on_sighup(config: uvicorn.Config) -> None:
    """Re-read the certificate files on SIGHUP (call from the running server)."""
    if config.ssl is None:
        return
    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reload_certificate, config)
