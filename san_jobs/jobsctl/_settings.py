"""jobsctl's connection settings: one typed object, read from ``SAN_JOBSCTL_*``
variables, overridden by the flags before the command (san_jobs.shared.cli_settings
derives them)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from san_jobs.client._channel import DEFAULT_TIMEOUT

ENV_PREFIX = "SAN_JOBSCTL_"
DEFAULT_TARGET = "127.0.0.1:50051"


class JobsctlSettings(BaseSettings):
    """How jobsctl reaches JobService; each field is also ``SAN_JOBSCTL_<NAME>``."""

    # An empty variable counts as unset, as `VAR= jobsctl ...` means in a shell.
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_ignore_empty=True, extra="forbid")

    target: str = Field(
        DEFAULT_TARGET, description="JobService address", json_schema_extra={"metavar": "HOST:PORT"}
    )
    timeout: float = Field(
        DEFAULT_TIMEOUT,
        gt=0,
        description="deadline of each call, seconds",
        json_schema_extra={"metavar": "SECONDS"},
    )
    token: SecretStr | None = Field(None, description="bearer token sent with every call")
    token_file: Path | None = Field(
        None, description="read the bearer token from PATH (trailing newline ignored)"
    )
    tls: bool = Field(False, description="connect with TLS, trusting the system root certificates")
    tls_ca: Path | None = Field(
        None, description="connect with TLS, trusting the CA certificate in PATH (PEM)"
    )
    tls_cert: Path | None = Field(
        None, description="client certificate (PEM) for mutual TLS; with --tls-key"
    )
    tls_key: Path | None = Field(None, description="the client certificate's key (PEM)")
