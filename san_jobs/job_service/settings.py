"""JobService settings: one typed object, read from SAN_JOBS_* environment
variables, overridden by command-line flags (cli.py)."""

from __future__ import annotations

import math
import os
import socket
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from san_jobs.job_service.auth.roles import Role
from san_jobs.job_service.domain.claim_limits import TypeLimit, parse_rate
from san_jobs.job_service.domain.job_types import JobType, default_deadlines, job_type_named
from san_jobs.job_service.domain.limits import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_MAX_PENDING_PER_CALLER,
    MAX_MAX_MESSAGE_BYTES,
    MIN_MAX_MESSAGE_BYTES,
)
from san_jobs.job_service.domain.priorities import UrgentPriorities
from san_jobs.job_service.domain.retention import RetentionPolicy, format_retention, parse_retention
from san_jobs.shared.cli_settings import HostPort
from san_jobs.shared.event_loop import EventLoopName
from san_jobs.shared.exposure import is_loopback
from san_jobs.shared.json_logs import LogFormat
from san_jobs.shared.otlp_settings import check_otlp_endpoint
from san_jobs.shared.secret_files import warn_if_shared
from san_jobs.shared.tls_settings import tls_pair_problem
from san_jobs.shared.token_files import read_token_file

ENV_PREFIX = "SAN_JOBS_"


def default_instance_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class JobServiceSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")
    # Set by _legacy_deadlines from SAN_JOBS_DEADLINE_<TYPE> (see deadlines()).
    _legacy_deadline: dict[JobType, float] = PrivateAttr(default_factory=dict)

    listen: HostPort = Field(
        "127.0.0.1:50051", description="HOST:PORT to serve gRPC on (port 0 picks a free one)"
    )
    database_url: str = Field(
        "sqlite+aiosqlite:///var/jobs.db",
        description="SQLAlchemy async URL: sqlite+aiosqlite:///PATH or postgresql+asyncpg://USER@HOST:PORT/DB",
    )
    # storage/schema_version.py: a start never applies a migration that instances of
    # the database's revision could not run beside.
    migrate_on_start: bool = Field(
        True,
        description="at start, apply pending migrations that running instances of the "
        "older version can run beside; off: refuse an older schema (run `job-service "
        "migrate` first)",
    )
    gateway: HostPort = Field("127.0.0.1:50052", description="HOST:PORT of AiGateway")
    # 10, not more: several instances share one gateway, whose --max-concurrency (64)
    # answers "gateway busy" beyond it, which the breaker takes as a rate limit and
    # pauses the type everywhere. A backlog on a fast provider drains best with 64 on
    # one or two instances (each claim, StreamCalls message and completion statement
    # then carries 64 jobs): the README's Performance section says so.
    workers: int = Field(10, ge=1, le=10_000, description="jobs run at once by this instance")
    lease: float = Field(60.0, gt=0, description="seconds a claim lasts without renewal")
    max_attempts: int = Field(3, ge=1, le=100, description="default attempts before FAILED")
    retry_base_delay: float = Field(2.0, ge=0, description="first retry delay, seconds")
    retry_max_delay: float = Field(300.0, ge=0, description="longest retry delay, seconds")
    deadline: float | None = Field(
        None, gt=0, description="gateway deadline for every job type, seconds"
    )
    # Keys are job type names (job_types.py); on the command line TYPE=SECONDS,
    # repeatable; in the environment a JSON object ({"TIL_GENERATION": 90}).
    deadline_for: dict[str, float] = Field(
        default_factory=dict,
        description="gateway deadline of one job type, seconds (repeatable; default: "
        "each type's own)",
        json_schema_extra={"metavar": "TYPE=SECONDS"},
    )
    poll_interval: float = Field(1.0, gt=0, description="fallback poll for due jobs, seconds")
    # Claim limits (domain/claim_limits.py), shared by every instance on the database.
    # Keys are job type names; on the command line TYPE=N/s and TYPE=N, repeatable.
    rate_limit: dict[str, float] = Field(
        default_factory=dict,
        description="job starts per second of one job type, all instances together "
        "(repeatable); jobs over it wait PENDING",
        json_schema_extra={"metavar": "TYPE=N/s"},
    )
    concurrency_limit: dict[str, int] = Field(
        default_factory=dict,
        description="jobs of one job type running at once, all instances together "
        "(repeatable); jobs over it wait PENDING",
        json_schema_extra={"metavar": "TYPE=N"},
    )
    max_running_per_caller: int | None = Field(
        None,
        ge=1,
        description="fair share: jobs of one caller (requested_by) running at once, all "
        "instances together, so one caller's backlog does not starve the others",
    )
    max_schedules_per_caller: int = Field(
        100,
        ge=1,
        description="schedules one authenticated caller (token or certificate name) may "
        "have; CreateSchedule of another answers RESOURCE_EXHAUSTED naming this cap "
        "(under --auth off there are no callers to count, and no cap)",
    )
    breaker_failures: int = Field(
        5,
        ge=1,
        description="transient gateway failures in a row (UNAVAILABLE, DEADLINE_EXCEEDED) "
        "that pause a job type for every instance",
    )
    breaker_probe_interval: float = Field(
        5.0, gt=0, description="while a job type is paused, seconds between probe jobs"
    )
    breaker_max_pause: float = Field(
        1800.0,
        gt=0,
        description="seconds after which a paused job type is claimed again and its jobs "
        "fail as without the breaker",
    )
    breaker_unreachable_after: float = Field(
        3.0,
        ge=0,
        description="seconds a gateway call may wait for a connection before its job type "
        "is paused for every instance, charging nothing (0: only --breaker-failures pause)",
    )
    batch_interval: float = Field(
        0.002,
        ge=0,
        le=1,
        description="under load, shortest time between two claims or enqueue commits, seconds",
    )
    grace: float = Field(30.0, ge=0, description="seconds in-flight jobs get to finish at shutdown")
    max_text_chars: int = Field(100_000, ge=1, description="longest input text accepted")
    # Who may use the most urgent priorities (domain/priorities.py, UrgentPriorities).
    submitter_most_urgent_priority: int = Field(
        1,
        ge=1,
        le=3,
        description="under authentication, the most urgent priority a submitter may give a "
        "job (1: any; 2: priority 1 is kept for operators and --urgent-callers)",
    )
    max_pending_per_caller: int = Field(
        DEFAULT_MAX_PENDING_PER_CALLER,
        ge=1,
        description="PENDING jobs (ready, delayed or waiting for dependencies) one "
        "authenticated caller may have, all instances together; an Enqueue past it "
        "answers RESOURCE_EXHAUSTED naming this cap (no cap under --auth off)",
    )
    urgent_callers: str = Field(
        "",
        description="callers (token or certificate names, comma-separated) whose jobs may "
        "take any priority, whatever --submitter-most-urgent-priority says",
        json_schema_extra={"metavar": "NAME,..."},
    )
    max_message_bytes: int = Field(
        DEFAULT_MAX_MESSAGE_BYTES,
        ge=MIN_MAX_MESSAGE_BYTES,
        le=MAX_MAX_MESSAGE_BYTES,
        description="largest gRPC message received or sent, bytes",
    )
    # StreamJobUpdates bounds. Job-id streams are cheap (~26 KB, offered only their
    # jobs' changes) and the web backend multiplexes every open job page over one
    # connection, so their bounds are generous; a live feed is offered every change,
    # so feeds get far smaller ones (they count as streams too).
    max_streams: int = Field(10_000, ge=1, description="streams open at once on this instance")
    max_streams_per_peer: int = Field(
        2_000, ge=1, description="streams open at once from one peer (client address)"
    )
    max_streams_per_connection: int = Field(
        2_000, ge=1, description="streams open at once on one client connection"
    )
    max_feeds: int = Field(100, ge=1, description="live feeds (no job_ids) open on this instance")
    max_feeds_per_peer: int = Field(10, ge=1, description="live feeds open from one peer")
    # Retention (san_jobs/job_service/pruner.py): terminal jobs are deleted this long after they
    # ended. Durations: 7d, 12h, 30m, 90s, 1d12h or seconds; off (or 0) keeps forever.
    retain_completed: str = Field(
        "7d",
        description="delete COMPLETED jobs this long after they ended: 7d, 12h, 30m, 90s or "
        "seconds; off (or 0) keeps them forever",
        json_schema_extra={"metavar": "DURATION"},
    )
    retain_failed: str = Field(
        "30d",
        description="delete FAILED jobs this long after they failed (same forms; off keeps)",
        json_schema_extra={"metavar": "DURATION"},
    )
    retain_cancelled: str = Field(
        "30d",
        description="delete CANCELLED jobs this long after they were cancelled (same forms; "
        "off keeps)",
        json_schema_extra={"metavar": "DURATION"},
    )
    retain_changes: str = Field(
        "7d",
        description="keep StreamJobChanges' changes this long (whatever the jobs' own "
        "retention); a consumer whose cursor is older gets CURSOR_EXPIRED (same forms; off keeps)",
        json_schema_extra={"metavar": "DURATION"},
    )
    prune_interval: float = Field(
        60.0,
        gt=0,
        description="seconds between two prune runs (one instance at a time prunes)",
    )
    instance_id: str = Field(
        default_factory=default_instance_id,
        description="name of this instance in logs and notifications (default HOST-PID-RANDOM)",
    )
    log_level: str = Field("INFO", description="DEBUG, INFO, WARNING or ERROR")
    # Traces (san_jobs.shared.tracing): off unless this or OTEL_EXPORTER_OTLP_ENDPOINT is set.
    otlp_endpoint: str | None = Field(
        None,
        description="send OpenTelemetry traces to this OTLP gRPC collector "
        "(http://HOST:4317; default OTEL_EXPORTER_OTLP_ENDPOINT, else no traces)",
        json_schema_extra={"metavar": "URL"},
    )
    _otlp_endpoint = field_validator("otlp_endpoint")(check_otlp_endpoint)
    log_format: LogFormat = Field(
        "text", description="text (a line for people) or json (one JSON object per line)"
    )
    # Readiness follows the database (san_jobs.job_service.db_health); 0 turns the checks off.
    health_interval: float = Field(
        2.0,
        ge=0,
        description="seconds between checks that the database answers; health reports "
        "san.jobs.v1.JobService NOT_SERVING while it does not (0: no checks)",
    )
    # Prometheus text at http://HOST:PORT/metrics (san_jobs.shared.metrics_http); off unless set.
    metrics_listen: HostPort | None = Field(
        None,
        description="serve Prometheus metrics at http://HOST:PORT/metrics (default off)",
        json_schema_extra={"metavar": "HOST:PORT"},
    )
    event_loop: EventLoopName = Field(
        "uvloop", description="uvloop (a fifth less CPU per job), or asyncio's own loop"
    )
    # TLS (san_jobs.shared.tls): the files are read and checked at start, re-read on SIGHUP.
    tls_cert: Path | None = Field(None, description="serve TLS with this PEM certificate chain")
    tls_key: Path | None = Field(None, description="the PEM private key of --tls-cert")
    tls_client_ca: Path | None = Field(
        None, description="mutual TLS: require client certificates signed by this PEM CA"
    )
    # san_jobs/job_service/auth/certificates.py. Unset: any certificate of the CA is admitted.
    tls_client_roles: dict[str, Role] = Field(
        default_factory=dict,
        description="mutual TLS: admit only the client certificate named NAME (its "
        "common name, else first subject alternative name), repeatable; others get "
        "PERMISSION_DENIED. Under --auth off (say so beyond loopback) it is the caller "
        "(requested_by) with that role; under --auth token the token decides",
        json_schema_extra={"metavar": "NAME=ROLE"},
    )
    gateway_tls_ca: Path | None = Field(
        None, description="call the gateway over TLS, trusting this PEM CA"
    )
    gateway_tls_cert: Path | None = Field(
        None, description="mutual TLS to the gateway: present this PEM certificate"
    )
    gateway_tls_key: Path | None = Field(
        None, description="the PEM private key of --gateway-tls-cert"
    )
    # For a gateway that knows its callers by token (its --caller-tokens-file).
    gateway_token_file: Path | None = Field(
        None,
        description="send the bearer token in this file on every gateway call "
        "(a gateway with --caller-tokens-file)",
    )
    insecure: bool = Field(
        False, description="listen beyond loopback without TLS and authentication anyway"
    )
    # Bearer tokens with roles (san_jobs.job_service.auth). Unset: "off" on a loopback address,
    # "token" on any other (secure by default); resolved when the settings are made.
    auth: Literal["off", "token"] | None = Field(
        None,
        description="off, or token: every RPC but health needs a bearer token "
        "(default off on loopback, token on any other address)",
    )

    @field_validator("gateway_token_file")
    @classmethod
    def _gateway_token_file(cls, path: Path | None) -> Path | None:
        if path is not None:
            read_token_file(path)  # unreadable or empty: refused at start, in one line
        return path

    def gateway_token(self) -> str | None:
        """The bearer token for the gateway (from --gateway-token-file), or None; a
        file others may read is logged (once)."""
        if self.gateway_token_file is None:
            return None
        token = read_token_file(self.gateway_token_file)
        warn_if_shared(self.gateway_token_file, "gateway token file")
        return token

    @model_validator(mode="after")
    def _resolve_auth(self) -> JobServiceSettings:
        if self.auth is None:
            self.auth = "off" if is_loopback(self.listen) else "token"
        return self

    def checks_tokens(self) -> bool:
        """True when every RPC but health needs a bearer token (--auth token)."""
        return self.auth == "token"

    @model_validator(mode="after")
    def _tls_pairs(self) -> JobServiceSettings:
        problem = tls_pair_problem("tls", self.tls_cert, self.tls_key, self.tls_client_ca)
        problem = problem or tls_pair_problem(
            "gateway-tls", self.gateway_tls_cert, self.gateway_tls_key
        )
        if problem:
            raise ValueError(problem)
        if self.tls_client_roles and self.tls_client_ca is None:
            raise ValueError("--tls-client-roles needs --tls-client-ca (mutual TLS)")
        return self

    def urgent_priorities(self) -> UrgentPriorities:
        """--submitter-most-urgent-priority and --urgent-callers, as the rule."""
        names = frozenset(n.strip() for n in self.urgent_callers.split(",") if n.strip())
        return UrgentPriorities(self.submitter_most_urgent_priority, names)

    def checks_certificates(self) -> bool:
        """True when only the client certificates named by --tls-client-roles are
        admitted (and, under --auth off, are the callers)."""
        return bool(self.tls_client_roles)

    def serves_tls(self) -> bool:
        """True when the service listens with TLS."""
        return self.tls_cert is not None

    def calls_gateway_over_tls(self) -> bool:
        """True when the gateway is called over TLS (a CA, or a client certificate, given)."""
        return self.gateway_tls_ca is not None or self.gateway_tls_cert is not None

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        if not value.startswith(("sqlite+aiosqlite://", "postgresql+asyncpg://")):
            raise ValueError(
                "expected sqlite+aiosqlite:///PATH or postgresql+asyncpg://USER@HOST:PORT/DB, "
                f"got {value!r}"
            )
        return value

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, value: str) -> str:
        upper = value.upper()
        if upper not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise ValueError("expected DEBUG, INFO, WARNING or ERROR")
        return upper

    @field_validator("deadline_for", mode="before")
    @classmethod
    def _deadline_for(cls, value: object) -> object:
        return parse_deadline_for(value)

    @field_validator("rate_limit", mode="before")
    @classmethod
    def _rate_limit(cls, value: object) -> object:
        return parse_rate_limits(value)

    @field_validator("concurrency_limit", mode="before")
    @classmethod
    def _concurrency_limit(cls, value: object) -> object:
        return parse_concurrency_limits(value)

    @field_validator("retain_completed", "retain_failed", "retain_cancelled", "retain_changes")
    @classmethod
    def _retention(cls, value: str) -> str:
        return format_retention(parse_retention(value))  # one line on a bad value

    def retention(self) -> RetentionPolicy:
        """How long each terminal status is kept (--retain-*)."""
        return RetentionPolicy(
            completed=parse_retention(self.retain_completed),
            failed=parse_retention(self.retain_failed),
            cancelled=parse_retention(self.retain_cancelled),
        )

    def claim_limits(self) -> dict[JobType, TypeLimit]:
        """Each limited job type's limits (--rate-limit, --concurrency-limit)."""
        names = self.rate_limit.keys() | self.concurrency_limit.keys()
        return {
            JobType(name): TypeLimit(self.rate_limit.get(name), self.concurrency_limit.get(name))
            for name in sorted(names)
        }

    @model_validator(mode="after")
    def _legacy_deadlines(self) -> JobServiceSettings:
        # SAN_JOBS_DEADLINE_<TYPE>, one variable per type, as the README documented
        # before --deadline-for; read for every registered type.
        self._legacy_deadline = legacy_deadlines(os.environ)
        return self

    def deadlines(self) -> dict[JobType, float]:
        """Each type's gateway deadline: --deadline if set, else its --deadline-for, else
        its SAN_JOBS_DEADLINE_<TYPE>, else its registry default."""
        if self.deadline is not None:
            return dict.fromkeys(JobType, self.deadline)
        chosen = default_deadlines()
        chosen.update(self._legacy_deadline)
        chosen.update({JobType(name): seconds for name, seconds in self.deadline_for.items()})
        return chosen


def _job_type_name(text: str) -> str:
    """The registered type `text` names (card-analysis, CARD_ANALYSIS); ValueError else."""
    name = text.strip().upper().replace("-", "_")
    if job_type_named(name) is None:
        known = ", ".join(t.value for t in JobType)
        raise ValueError(f"unknown job type {text.strip()!r} (known: {known})")
    return name


def _seconds(text: object, what: str) -> float:
    try:
        seconds = float(text)  # type: ignore[arg-type]  # anything else is refused below
    except (TypeError, ValueError):
        raise ValueError(f"{what}: {text!r} is not a number of seconds") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{what}: must be a number of seconds above 0, got {text!r}")
    return seconds


def parse_deadline_for(value: object) -> dict[str, float]:
    """--deadline-for as given (the flags' TYPE=SECONDS pairs, SAN_JOBS_DEADLINE_FOR's
    JSON object): seconds by registered type name (card-analysis is CARD_ANALYSIS)."""
    if not isinstance(value, Mapping):
        raise ValueError('expected seconds by job type, e.g. {"TIL_GENERATION": 90}')
    parsed: dict[str, float] = {}
    for key, seconds in value.items():
        name = _job_type_name(str(key))
        parsed[name] = _seconds(seconds, name)
    return parsed


def _limits_by_type(value: object, example: str) -> Mapping[object, object]:
    if not isinstance(value, Mapping):
        raise ValueError(f"expected limits by job type, e.g. {example}")
    return value


def parse_rate_limits(value: object) -> dict[str, float]:
    """--rate-limit as given (TYPE=N/s pairs, or a JSON object): jobs per second by
    registered type name."""
    pairs = _limits_by_type(value, '{"CARD_ANALYSIS": "20/s"}')
    parsed: dict[str, float] = {}
    for key, rate in pairs.items():
        name = _job_type_name(str(key))
        try:
            parsed[name] = parse_rate(rate)
        except ValueError as error:
            raise ValueError(f"{name}: {error}") from None
    return parsed


def parse_concurrency_limits(value: object) -> dict[str, int]:
    """--concurrency-limit as given (TYPE=N pairs, or a JSON object): jobs running at
    once by registered type name."""
    pairs = _limits_by_type(value, '{"CARD_ANALYSIS": 5}')
    parsed: dict[str, int] = {}
    for key, count in pairs.items():
        name = _job_type_name(str(key))
        try:
            jobs = int(str(count).strip())
        except ValueError:
            raise ValueError(f"{name}: expected a whole number of jobs, got {count!r}") from None
        if jobs < 1:
            raise ValueError(f"{name}: at least 1 job must run at once, got {count!r}")
        parsed[name] = jobs
    return parsed


def legacy_deadlines(environ: Mapping[str, str]) -> dict[JobType, float]:
    """The types' deadlines set by SAN_JOBS_DEADLINE_<TYPE> variables."""
    found: dict[JobType, float] = {}
    for job_type in JobType:
        variable = f"{ENV_PREFIX}DEADLINE_{job_type.value}"
        if environ.get(variable):
            found[job_type] = _seconds(environ[variable], variable)
    return found
