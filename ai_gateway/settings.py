"""The gateway's settings: one typed object, read from ``SAN_GATEWAY_*`` variables.

Command-line flags (see :mod:`ai_gateway.cli`) override the environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ai_gateway.faults import FaultConfig

ENV_PREFIX = "SAN_GATEWAY_"
BackendName = Literal["local", "openai", "instant"]


class GatewaySettings(BaseSettings):
    """Everything the gateway can be told; each field is also ``SAN_GATEWAY_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_ignore_empty=True, extra="forbid")

    listen: str = Field("127.0.0.1:50052", description="HOST:PORT to listen on (port 0: any)")
    backend: BackendName = Field("local", description="local, openai or instant")
    openai_base_url: str = Field("https://api.openai.com/v1", description="OpenAI-compatible API")
    openai_api_key: SecretStr = Field(SecretStr(""), description="API key (Bearer token)")
    openai_chat_model: str = Field("gpt-4o-mini", description="chat completions model")
    openai_embedding_model: str = Field("text-embedding-3-small", description="embeddings model")
    max_input_tokens: int = Field(8192, gt=0, description="refuse inputs estimated above this")
    rate_limit: float = Field(0.0, ge=0, description="requests/second per caller; 0: unlimited")
    burst: int = Field(0, ge=0, description="token bucket size; 0: max(1, rate limit)")
    max_concurrency: int = Field(64, ge=1, description="calls doing backend work at once")
    min_deadline: float = Field(0.05, ge=0, description="refuse calls with less time left (s)")
    grace: float = Field(5.0, ge=0, description="seconds to finish calls on shutdown")
    call_log: Path | None = Field(None, description="append one JSON line per call here")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="logging")
    event_loop: Literal["uvloop", "asyncio"] = Field(
        "uvloop", description="uvloop, or asyncio's own event loop"
    )
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

    @field_validator("listen")
    @classmethod
    def _check_listen(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(f"expected HOST:PORT with a port from 0 to 65535, got {value!r}")
        return value

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
