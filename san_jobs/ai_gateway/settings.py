"""The gateway's settings: one typed object, read from ``SAN_GATEWAY_*`` variables.

Command-line flags (see :mod:`san_jobs.ai_gateway.cli`) override the environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from san_jobs.ai_gateway.callers import DEFAULT_CLIENT_NAMES, read_caller_tokens
from san_jobs.ai_gateway.faults import FaultConfig
from san_jobs.shared.cli_settings import HostPort
from san_jobs.shared.client_identity import ClientNames
from san_jobs.shared.event_loop import EventLoopName
from san_jobs.shared.json_logs import LogFormat
from san_jobs.shared.otlp_settings import check_otlp_endpoint
from san_jobs.shared.secret_files import warn_if_shared
from san_jobs.shared.tls_settings import tls_pair_problem
from san_jobs.shared.token_files import read_token_file

ENV_PREFIX = "SAN_GATEWAY_"
MIB = 1024 * 1024
BackendName = Literal["local", "openai", "instant"]


class GatewaySettings(BaseSettings):
    """Everything the gateway can be told; each field is also ``SAN_GATEWAY_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_ignore_empty=True, extra="forbid")

    listen: HostPort = Field("127.0.0.1:50052", description="HOST:PORT to listen on (port 0: any)")
    backend: BackendName = Field("local", description="local, openai or instant")
    openai_base_url: str = Field("https://api.openai.com/v1", description="OpenAI-compatible API")
    openai_api_key: SecretStr = Field(SecretStr(""), description="API key (Bearer token)")
    openai_api_key_file: Path | None = Field(
        None, description="read the API key from this file instead (keeps it out of ps)"
    )
    openai_chat_model: str = Field("gpt-4o-mini", description="chat completions model")
    openai_embedding_model: str = Field("text-embedding-3-small", description="embeddings model")
    # The fallback (san_jobs/ai_gateway/fallback.py): serves a call when the primary fails
    # transiently, and every call while the primary's circuit is open.
    fallback_backend: BackendName | None = Field(
        None, description="serve calls from this backend when --backend fails transiently"
    )
    primary_failures: int = Field(
        3, ge=1, description="transient failures in a row that open the primary's circuit"
    )
    fallback_cooldown: float = Field(
        30.0, gt=0, description="seconds the open circuit sends calls to the fallback alone"
    )
    fallback_reserve: float = Field(
        1.0, ge=0, description="seconds of a call's deadline kept for the fallback"
    )
    # The result cache and the sharing of identical calls (san_jobs/ai_gateway/result_cache.py).
    cache_entries: int = Field(0, ge=0, description="answers kept for identical calls; 0: off")
    cache_ttl: float = Field(600.0, gt=0, description="seconds an answer is kept in the cache")
    max_input_tokens: int = Field(8192, gt=0, description="refuse inputs estimated above this")
    rate_limit: float = Field(0.0, ge=0, description="requests/second per caller; 0: unlimited")
    burst: int = Field(0, ge=0, description="token bucket size; 0: max(1, rate limit)")
    max_concurrency: int = Field(64, ge=1, description="calls doing backend work at once")
    min_deadline: float = Field(0.05, ge=0, description="refuse calls with less time left (s)")
    grace: float = Field(5.0, ge=0, description="seconds to finish calls on shutdown")
    # Above JobService's largest call (its own --max-message-bytes, 4 MiB, plus envelope),
    # so that whatever JobService may send is received.
    max_message_bytes: int = Field(
        16 * MIB, ge=MIB, description="gRPC receive and send limit per message (bytes)"
    )
    max_stream_calls: int = Field(
        1000, ge=1, description="StreamCalls: calls in flight plus unsent results per stream"
    )
    call_log: Path | None = Field(None, description="append one JSON line per call here")
    caller_tokens_file: Path | None = Field(
        None,
        description="callers allowed in: NAME TOKEN lines (bearer tokens); re-read on SIGHUP",
    )
    # TLS (san_jobs.shared.tls): the files are read and checked at start, re-read on SIGHUP.
    tls_cert: Path | None = Field(None, description="serve TLS with this PEM certificate chain")
    tls_key: Path | None = Field(None, description="the PEM private key of --tls-cert")
    tls_client_ca: Path | None = Field(
        None, description="mutual TLS: require client certificates signed by this PEM CA"
    )
    # The CA may sign more than JobService's certificate (make certs signs the
    # operator's and san-web's too): being signed is not enough to call.
    tls_client_names: str = Field(
        str(DEFAULT_CLIENT_NAMES),
        description="mutual TLS: the client certificate names (common name, else first "
        "SAN) admitted, comma-separated; others get PERMISSION_DENIED; * admits any",
        json_schema_extra={"metavar": "NAME,..."},
    )
    insecure: bool = Field(
        False,
        description="listen beyond loopback without TLS and caller authentication anyway "
        "(a switch: takes no value)",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="logging")
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
    # Prometheus text at http://HOST:PORT/metrics (san_jobs.shared.metrics_http); off unless set.
    metrics_listen: HostPort | None = Field(
        None,
        description="serve Prometheus metrics at http://HOST:PORT/metrics (default off)",
        json_schema_extra={"metavar": "HOST:PORT"},
    )
    event_loop: EventLoopName = Field("uvloop", description="uvloop, or asyncio's own event loop")
    fault_latency: float = Field(0.0, ge=0, description="injected delay before the backend (s)")
    fault_unavailable_rate: float = Field(0.0, ge=0, le=1, description="P(injected UNAVAILABLE)")
    fault_rate_limit_rate: float = Field(0.0, ge=0, le=1, description="P(injected 429)")
    fault_malformed_rate: float = Field(0.0, ge=0, le=1, description="P(injected bad JSON)")
    fault_retry_delay: float = Field(1.0, ge=0, description="RetryInfo of injected 429s (s)")
    fault_seed: int | None = Field(None, description="seed for fault draws (repeatable runs)")

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @field_validator("openai_api_key_file")
    @classmethod
    def _check_key_file(cls, path: Path | None, info: ValidationInfo) -> Path | None:
        if path is None:
            return None
        key = info.data.get("openai_api_key")
        if isinstance(key, SecretStr) and key.get_secret_value():
            raise ValueError("give the API key or the API key file, not both")
        read_key_file(path)  # unreadable or empty: refused at startup, not at the first call
        return path

    @field_validator("caller_tokens_file")
    @classmethod
    def _check_caller_tokens(cls, path: Path | None) -> Path | None:
        if path is not None:
            read_caller_tokens(path)  # a bad file is refused at startup, in one line
        return path

    @field_validator("tls_client_names")
    @classmethod
    def _check_client_names(cls, text: str) -> str:
        ClientNames.parse(text)
        return text

    @model_validator(mode="after")
    def _check_client_names_need_mutual_tls(self) -> GatewaySettings:
        # Given without mutual TLS there are no certificates to sort: an allow-list
        # that silently does nothing would be read as a protection.
        if "tls_client_names" in self.model_fields_set and self.tls_client_ca is None:
            raise ValueError("--tls-client-names needs --tls-client-ca (mutual TLS)")
        return self

    @model_validator(mode="after")
    def _check_fallback(self) -> GatewaySettings:
        if self.fallback_backend is not None and self.fallback_backend == self.backend:
            raise ValueError("the fallback backend must differ from --backend")
        return self

    @model_validator(mode="after")
    def _check_tls_pair(self) -> GatewaySettings:
        problem = tls_pair_problem("tls", self.tls_cert, self.tls_key, self.tls_client_ca)
        if problem:
            raise ValueError(problem)
        return self

    def serves_tls(self) -> bool:
        """True when the gateway listens with TLS."""
        return self.tls_cert is not None

    def client_names(self) -> ClientNames:
        """The client certificate names admitted under mutual TLS."""
        return ClientNames.parse(self.tls_client_names)

    def api_key(self) -> SecretStr:
        """The upstream API key: from the key file when one is set, else the setting."""
        if self.openai_api_key_file is not None:
            key = read_key_file(self.openai_api_key_file)
            warn_if_shared(self.openai_api_key_file, "API key file")
            return SecretStr(key)
        return self.openai_api_key

    def faults(self) -> FaultConfig:
        """The fault-injection part of the settings."""
        return FaultConfig(
            latency=self.fault_latency,
            unavailable_rate=self.fault_unavailable_rate,
            rate_limit_rate=self.fault_rate_limit_rate,
            malformed_rate=self.fault_malformed_rate,
            retry_delay=self.fault_retry_delay,
            seed=self.fault_seed,
        )


def read_key_file(path: Path) -> str:
    """The key in ``path``, read as every token file is (shared/token_files.py: the
    white space around it dropped, one printable ASCII word, or ValueError): it goes
    into the upstream's ``authorization`` header, where nothing else would pass."""
    return read_token_file(path, "the API key file")
