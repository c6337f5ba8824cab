"""san-web's link to JobService: TLS (or mutual TLS) and the bearer token it calls
with, read once at start so that a wrong path stops the start, not the first page."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from san_jobs.client import AsyncJobsClient, ChannelSettings
from san_jobs.client._channel import DEFAULT_TIMEOUT
from san_jobs.shared.client_files import read_client_tls, token_in_the_clear
from san_jobs.shared.secret_files import shared_secret_warning
from san_jobs.shared.token_files import TokenFileError, read_token_file, token_file_warning


class LinkSettingsError(Exception):
    """A JobService link setting that cannot be used (one line, names the flag)."""


@dataclass(frozen=True)
class JobServiceLink:
    """What san-web's JobService client is built with; secrets kept out of repr()."""

    tls_ca: bytes | None = None
    tls_cert: bytes | None = None
    tls_key: bytes | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    warnings: tuple[str, ...] = ()

    def client_factory(
        self, *, timeout: float = DEFAULT_TIMEOUT
    ) -> Callable[[str], AsyncJobsClient]:
        """``create_app``'s ``client_factory``: an AsyncJobsClient for an address, its
        unary calls (the outbox's Enqueue among them) bounded by ``timeout`` seconds."""
        return functools.partial(
            AsyncJobsClient,
            timeout=timeout,
            tls_ca=self.tls_ca,
            tls_cert=self.tls_cert,
            tls_key=self.tls_key,
            token=self.token,
        )


def load_link(
    *,
    target: str,
    tls_ca: Path | None,
    tls_cert: Path | None,
    tls_key: Path | None,
    token_file: Path | None,
) -> JobServiceLink:
    """Read the files named by ``--job-service-tls-ca/-cert/-key`` and
    ``--job-service-token-file``; any CA or certificate means TLS toward JobService."""
    try:
        files = read_client_tls("job-service-tls", tls_ca, tls_cert, tls_key)
    except ValueError as error:
        raise LinkSettingsError(str(error)) from None
    token: str | None = None
    warnings: list[str] = []
    if token_file is not None:
        try:
            token = read_token_file(token_file)
        except TokenFileError as error:
            raise LinkSettingsError(f"--job-service-token-file: {error}") from None
        try:
            ChannelSettings.build("", token=token)  # checks the token's characters
        except ValueError as error:
            raise LinkSettingsError(f"--job-service-token-file {token_file}: {error}") from None
        warning = token_file_warning(token_file)
        if warning:
            warnings.append(warning)
    if tls_key and (key_warning := shared_secret_warning(tls_key, "TLS private key file")):
        warnings.append(key_warning)
    clear = token_in_the_clear(
        target,
        token=token,
        tls=files.ca is not None or files.cert is not None,
        advice="use --job-service-tls-ca",
    )
    if clear:
        warnings.append(clear)
    return JobServiceLink(
        tls_ca=files.ca,
        tls_cert=files.cert,
        tls_key=files.key,
        token=token,
        warnings=tuple(warnings),
    )
