"""How jobsctl reaches JobService: TLS files and the token from its settings (flags
over ``SAN_JOBSCTL_*`` variables), and what to tell the user when the connection
itself fails."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from san_jobs.client import ChannelSettings, JobsClient, ServiceUnavailableError
from san_jobs.jobsctl._settings import JobsctlSettings
from san_jobs.shared.cli_settings import env_of, flags_given, settings_of
from san_jobs.shared.client_files import read_client_tls, token_in_the_clear
from san_jobs.shared.secret_files import shared_secret_warning
from san_jobs.shared.token_files import TokenFileError, read_token_file, token_file_warning

ENV_TOKEN = env_of(JobsctlSettings, "token")
ENV_TOKEN_FILE = env_of(JobsctlSettings, "token_file")


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


def _token(settings: JobsctlSettings, given: frozenset[str], warnings: list[str]) -> str | None:
    # The command line is read first as a whole, then the environment: --token-file
    # wins over SAN_JOBSCTL_TOKEN, and --token over SAN_JOBSCTL_TOKEN_FILE.
    token = None if settings.token is None else settings.token.get_secret_value()
    token_file = settings.token_file
    if given & {"token", "token_file"}:
        token = token if "token" in given else None
        token_file = token_file if "token_file" in given else None
        where = "--token and --token-file"
    else:
        where = f"{ENV_TOKEN} and {ENV_TOKEN_FILE}"
    if token is not None and token_file is not None:
        raise SettingsError(f"{where} both give a token: keep one")
    if token is not None:
        return token
    if token_file is None:
        return None
    try:
        value = read_token_file(token_file)
    except TokenFileError as error:
        raise SettingsError(str(error)) from None
    warning = token_file_warning(token_file)
    if warning:
        warnings.append(warning)
    return value


def resolve(args: argparse.Namespace) -> Connection:
    """The connection settings from ``args`` (parsed by jobsctl's parser, which read
    the flags over the environment), checked: every file is read now, so a wrong path
    is a usage error, not a failed call."""
    settings = settings_of(args, JobsctlSettings)
    warnings: list[str] = []
    token = _token(settings, flags_given(args), warnings)
    try:
        files = read_client_tls("tls", settings.tls_ca, settings.tls_cert, settings.tls_key)
    except ValueError as error:
        raise SettingsError(str(error)) from None
    key_file = settings.tls_key
    if key_file and (warning := shared_secret_warning(key_file, "TLS private key file")):
        warnings.append(warning)
    try:
        channel = ChannelSettings.build(
            settings.target,
            tls=settings.tls,
            tls_ca=files.ca,
            tls_cert=files.cert,
            tls_key=files.key,
            token=token,
            timeout=settings.timeout,
        )
    except ValueError as error:
        raise SettingsError(str(error)) from None
    clear = token_in_the_clear(
        settings.target, token=token, tls=channel.tls, advice="use --tls-ca or --tls"
    )
    if clear:
        warnings.append(clear)
    return Connection(channel, warnings)


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
