"""How jobsctl reaches JobService: TLS files and the token from flags or the
environment, and what to tell the user when the connection itself fails."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from clients._token_file import TokenFileError, read_token_file, token_file_warning
from san_jobs.client import ChannelSettings, JobsClient, ServiceUnavailableError
from san_jobs.client._channel import read_pem
from san_shared.exposure import is_loopback

ENV_TOKEN = "SAN_JOBSCTL_TOKEN"
ENV_TOKEN_FILE = "SAN_JOBSCTL_TOKEN_FILE"
ENV_TLS = "SAN_JOBSCTL_TLS"
ENV_TLS_CA = "SAN_JOBSCTL_TLS_CA"
ENV_TLS_CERT = "SAN_JOBSCTL_TLS_CERT"
ENV_TLS_KEY = "SAN_JOBSCTL_TLS_KEY"


class SettingsError(Exception):
    """A connection setting that cannot be used (one line, names the flag)."""


@dataclass
class Connection:
    """The resolved settings, and warnings to print before the command runs."""

    settings: ChannelSettings
    warnings: list[str] = field(default_factory=list)

    def client(self) -> JobsClient:
        """A client with these settings."""
        s = self.settings
        return JobsClient(
            s.target,
            tls=s.tls,
            tls_ca=s.root_certificates,
            tls_cert=s.client_certificate,
            tls_key=s.client_key,
            token=s.token,
            timeout=s.timeout,
        )


def _pick(flag: str | None, env: Mapping[str, str], name: str) -> str | None:
    """A flag given on the command line beats its environment variable."""
    return flag if flag is not None else (env.get(name) or None)


def _token(args: argparse.Namespace, env: Mapping[str, str], warnings: list[str]) -> str | None:
    # The command line is read first as a whole, then the environment: --token-file
    # wins over SAN_JOBSCTL_TOKEN, and --token over SAN_JOBSCTL_TOKEN_FILE.
    for token, token_file, where in (
        (args.token, args.token_file, "--token and --token-file"),
        (env.get(ENV_TOKEN) or None, env.get(ENV_TOKEN_FILE) or None,
         f"{ENV_TOKEN} and {ENV_TOKEN_FILE}"),
    ):  # fmt: skip
        if token is not None and token_file is not None:
            raise SettingsError(f"{where} both give a token: keep one")
        if token is not None:
            return str(token)
        if token_file is not None:
            try:
                value = read_token_file(token_file)
            except TokenFileError as error:
                raise SettingsError(str(error)) from None
            warning = token_file_warning(token_file)
            if warning:
                warnings.append(warning)
            return value
    return None


def _pem(path: str | None, flag: str) -> bytes | None:
    if path is None:
        return None
    try:
        return read_pem(path, flag)
    except OSError as error:
        raise SettingsError(f"cannot read {flag} {path}: {error.strerror}") from None
    except ValueError as error:
        raise SettingsError(str(error)) from None


def resolve(args: argparse.Namespace, env: Mapping[str, str] = os.environ) -> Connection:
    """The connection settings from parsed ``args`` and ``env``, checked: every file
    is read now, so a wrong path is a usage error, not a failed call."""
    warnings: list[str] = []
    token = _token(args, env, warnings)
    ca = _pem(_pick(args.tls_ca, env, ENV_TLS_CA), "--tls-ca")
    cert = _pem(_pick(args.tls_cert, env, ENV_TLS_CERT), "--tls-cert")
    key = _pem(_pick(args.tls_key, env, ENV_TLS_KEY), "--tls-key")
    if (cert is None) != (key is None):
        raise SettingsError("--tls-cert and --tls-key go together (mutual TLS needs both)")
    tls = bool(args.tls) or env.get(ENV_TLS) == "1"
    try:
        settings = ChannelSettings.build(
            args.target,
            tls=tls,
            tls_ca=ca,
            tls_cert=cert,
            tls_key=key,
            token=token,
            timeout=args.timeout,
        )
    except ValueError as error:
        raise SettingsError(str(error)) from None
    if token is not None and not settings.tls and not is_loopback(args.target):
        warnings.append(
            f"the token goes to {args.target} without TLS, readable on the way "
            "(use --tls-ca or --tls)"
        )
    return Connection(settings, warnings)


def unavailable_message(error: ServiceUnavailableError, settings: ChannelSettings) -> str:
    """One line for a call that did not reach JobService, saying what to try when the
    cause is TLS (gRPC reports every such failure as UNAVAILABLE)."""
    where = f"cannot reach JobService at {settings.target}"
    text = str(error)
    if "WRONG_VERSION_NUMBER" in text:
        return (
            f"{where}: the TLS handshake failed because the server does not speak TLS "
            "(drop --tls/--tls-ca, or start the server with --tls-cert/--tls-key)"
        )
    if "CERTIFICATE_VERIFY_FAILED" in text:
        trusted = "the CA in --tls-ca" if settings.root_certificates else "the system roots"
        return (
            f"{where}: the TLS handshake failed because the server's certificate is not "
            f"signed by {trusted} or does not name this host (give the CA that signed it "
            "with --tls-ca, and a --target the certificate names)"
        )
    if "security handshaker" in text:
        return (
            f"{where}: TLS could not start with this client certificate "
            "(check that --tls-cert and --tls-key belong together)"
        )
    if "Socket closed" in text or "Connection reset" in text:
        if not settings.tls:
            hint = "if it serves TLS, add --tls-ca CA_FILE, or --tls for a public CA"
        elif settings.client_certificate is None:
            hint = "if it requires client certificates (mutual TLS), give --tls-cert and --tls-key"
        else:
            hint = "the server may not accept this client certificate (check its CA)"
        return f"{where}: the server closed the connection ({hint})"
    return f"{where}: {text}"
