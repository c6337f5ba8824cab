"""What both gRPC servers (job-service, ai-gateway) do to start, in one place: refuse
to serve beyond loopback unprotected, read the TLS files, bind; each failure one
StartupError line that the console script prints before exiting 1.

Before, each server had its own copy: job-service took a failed bind's RuntimeError,
ai-gateway a bound port of 0 (an OSError), and ai-gateway's script caught every
RuntimeError as if it were a start's."""

from __future__ import annotations

from pathlib import Path

import grpc

from san_jobs.shared import tls as tls_files
from san_jobs.shared.exposure import exposure_problem
from san_jobs.shared.metrics_http import metrics_exposure_problem


class StartupError(RuntimeError):
    """The server cannot start; the message says why in one line."""


def check_exposure(
    listen: str, metrics_listen: str | None, *, tls: bool, authenticated: bool, insecure: bool
) -> None:
    """StartupError when the server (or its metrics) would serve beyond loopback
    without TLS and authentication and without --insecure (shared/exposure.py)."""
    problem = exposure_problem(
        listen, tls=tls, authenticated=authenticated, insecure=insecure
    ) or metrics_exposure_problem(metrics_listen, insecure=insecure)
    if problem:
        raise StartupError(problem)


def server_tls(
    cert: Path | None, key: Path | None, client_ca: Path | None
) -> grpc.ServerCredentials | None:
    """The TLS credentials to serve with (None without a certificate and key: plain
    text); StartupError, one line, when a file cannot be used."""
    if cert is None or key is None:
        return None
    try:
        return tls_files.server_credentials(cert, key, client_ca)
    except tls_files.TlsFileError as error:
        raise StartupError(str(error)) from None


def bind(server: grpc.aio.Server, listen: str, credentials: grpc.ServerCredentials | None) -> int:
    """Bind `server` to `listen`; the port bound (the one given, or the one the system
    chose for port 0); StartupError when nothing could be bound (grpc raises or
    answers 0, depending on its version)."""
    try:
        if credentials is None:
            port = server.add_insecure_port(listen)
        else:
            port = server.add_secure_port(listen, credentials)
    except RuntimeError as error:
        raise StartupError(f"cannot listen on {listen}: {error}") from None
    if port == 0:
        raise StartupError(f"cannot listen on {listen}")
    return port
