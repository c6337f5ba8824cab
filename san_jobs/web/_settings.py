"""san-web's settings: one typed object, read from ``SAN_WEB_*`` variables and
overridden by the flags (san_jobs.shared.cli_settings derives them from these fields)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from san_jobs.client._channel import DEFAULT_TIMEOUT
from san_jobs.shared.cli_settings import HostPort
from san_jobs.web._client_address import parse_networks
from san_jobs.web._days import (
    DEFAULT_CHECK_INTERVAL,
    DEFAULT_TIL_AT,
    DEFAULT_TIME_ZONE,
    parse_til_at,
    time_zone,
)
from san_jobs.web._login_throttle import DEFAULT_FREE_FAILURES, DEFAULT_MAX_FAILURES_PER_ADDRESS
from san_jobs.web.app import DEFAULT_BODY_TIMEOUT, DEFAULT_MAX_BODY_BYTES, OutboxSettings

ENV_PREFIX = "SAN_WEB_"
DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./var/san-web.db"
DEFAULT_OUTBOX = OutboxSettings()
LONGEST_WAIT = 86_400.0
"""Every time limit is below a day (which also refuses nan and inf)."""

UvicornLogLevel = Literal["critical", "error", "warning", "info", "debug", "trace"]


def _seconds(default: float, description: str) -> float:
    return Field(
        default,
        gt=0,
        lt=LONGEST_WAIT,
        description=description,
        json_schema_extra={"metavar": "SECONDS"},
    )


def _count(default: int, description: str) -> int:
    return Field(default, ge=1, description=description, json_schema_extra={"metavar": "N"})


def _path(description: str) -> Path | None:
    return Field(None, description=description, json_schema_extra={"metavar": "PATH"})


class WebSettings(BaseSettings):
    """Everything san-web can be told; each field is also ``SAN_WEB_<NAME>``."""

    # An empty variable counts as unset, as `VAR= san-web ...` means in a shell.
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_ignore_empty=True, extra="forbid")

    listen: HostPort = Field(
        "127.0.0.1:8000",
        description="where to serve HTTP (port 0 picks a free one)",
        json_schema_extra={"metavar": "HOST:PORT"},
    )
    job_service: str = Field(
        "127.0.0.1:50051",
        description="JobService address",
        json_schema_extra={"metavar": "HOST:PORT"},
    )
    database_url: str = Field(
        DEFAULT_DATABASE_URL,
        description="SQLAlchemy async URL of san-web's own scraps table",
        json_schema_extra={"metavar": "URL"},
    )
    max_body_bytes: int = Field(
        DEFAULT_MAX_BODY_BYTES,
        ge=1,
        description="largest request body; bigger ones get 413",
        json_schema_extra={"metavar": "BYTES"},
    )
    # Each open page holds one connection (its live event stream) for as long as it is open.
    max_connections: int = _count(
        100,
        "open connections at most, counted from accept (TLS handshakes included); one "
        "more is answered 503 and closed (over HTTPS: closed)",
    )
    max_connections_per_address: int = _count(
        20,
        "open connections from one client address (IPv6: one /64) at most, --trusted-proxies "
        "excepted; one more is answered 503 and closed (over HTTPS: closed), others are served",
    )
    header_timeout: float = _seconds(
        5.0,
        "time a client has to finish the TLS handshake and send a whole request head, "
        "from connecting or from its previous answer; then 408 (or, mid-handshake, "
        "nothing) and closed",
    )
    body_timeout: float = _seconds(
        DEFAULT_BODY_TIMEOUT,
        "time a client has to send a whole request body after its head; then 408",
    )
    job_service_timeout: float = _seconds(
        DEFAULT_TIMEOUT,
        "deadline of each call to JobService, the outbox's deliveries included "
        "(the outbox's claim lease is twice it)",
    )
    outbox_poll_interval: float = _seconds(
        DEFAULT_OUTBOX.poll_interval,
        "how often the outbox relay looks for scraps to hand to JobService when nothing woke it",
    )
    outbox_max_backoff: float = _seconds(
        DEFAULT_OUTBOX.max_backoff,
        "longest wait between two hand-off attempts while JobService is unreachable",
    )
    # The users' days (_days.py).
    til_at: str = Field(
        DEFAULT_TIL_AT.isoformat(timespec="minutes"),
        description="end of each user's day, in their time zone: the day's scraps then "
        "become a 'today I learned' note and recall questions",
        json_schema_extra={"metavar": "HH:MM"},
    )
    time_zone: str = Field(
        DEFAULT_TIME_ZONE,
        description="IANA time zone of the shared space (--auth off) and of users who set "
        "none (`san-web users set-time-zone`)",
        json_schema_extra={"metavar": "ZONE"},
    )
    day_check_interval: float = _seconds(
        DEFAULT_CHECK_INTERVAL,
        "how often san-web looks for ended days to make (and sends what it could not)",
    )
    log_level: UvicornLogLevel = Field("warning", description="uvicorn log level")
    # Who may use san-web (_auth_cli.py).
    auth: Literal["off", "password"] | None = Field(
        None,
        description="off: no login, one shared space (the default on a loopback address); "
        "password: users log in (the default on any other address; add them with "
        "`san-web users create NAME`)",
    )
    allowed_hosts: str | None = Field(
        None,
        description="comma-separated Host names san-web answers to (others get 421); "
        "'*.example.com' allows names under it, '*' any (default: the listen address, "
        "localhost, 127.0.0.1, ::1)",
        json_schema_extra={"metavar": "NAMES"},
    )
    login_max_failures: int = _count(
        DEFAULT_FREE_FAILURES,
        "failed logins of one user name from one client address before each further "
        "try from there waits (429): 30 s, doubling up to 15 minutes; a success resets",
    )
    login_max_failures_per_address: int = _count(
        DEFAULT_MAX_FAILURES_PER_ADDRESS,
        "failed logins from one client address within 15 minutes before its logins get 429",
    )
    trusted_proxies: str | None = Field(
        None,
        description="comma-separated addresses or networks of reverse proxies whose "
        "X-Forwarded-For / X-Forwarded-Proto are believed (default: none; the headers are "
        "ignored and each connection's own address is the client)",
        json_schema_extra={"metavar": "ADDRESSES"},
    )
    # HTTPS (_https.py): the files are checked at start, re-read on SIGHUP.
    tls_cert: Path | None = _path("serve HTTPS with this certificate (PEM; with --tls-key)")
    tls_key: Path | None = _path("the certificate's private key (PEM)")
    tls_client_ca: Path | None = _path(
        "also require browser/client certificates signed by this CA (PEM)"
    )
    insecure: bool = Field(
        False,
        description="listen beyond loopback even without TLS and password logins "
        "(a risk you accept)",
    )
    # The link to JobService (_job_service_link.py), read once at start.
    job_service_tls_ca: Path | None = _path("call JobService over TLS, trusting this CA (PEM)")
    job_service_tls_cert: Path | None = _path(
        "client certificate toward JobService, for mutual TLS (PEM)"
    )
    job_service_tls_key: Path | None = _path("that certificate's key (PEM)")
    job_service_token_file: Path | None = _path(
        "file holding the bearer token san-web calls JobService with (role submitter; "
        "operator for /ops' actions, viewer for looking only)"
    )

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, value: str | None) -> str | None:
        if value is not None:
            parse_networks(value)  # a ValueError names the entry that is no address
        return value

    @field_validator("til_at")
    @classmethod
    def _time_of_day(cls, value: str) -> str:
        parse_til_at(value)  # a ValueError says what is wrong
        return value

    @field_validator("time_zone")
    @classmethod
    def _zone(cls, value: str) -> str:
        time_zone(value)
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value
