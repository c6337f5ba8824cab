"""JobService settings: one typed object, read from SAN_JOBS_* environment
variables, overridden by command-line flags (cli.py)."""

from __future__ import annotations

import os
import socket
import uuid
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from job_service.domain.limits import (
    DEFAULT_MAX_MESSAGE_BYTES,
    MAX_MAX_MESSAGE_BYTES,
    MIN_MAX_MESSAGE_BYTES,
)
from job_service.domain.model import JobType

ENV_PREFIX = "SAN_JOBS_"


def default_instance_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class JobServiceSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    listen: str = Field("127.0.0.1:50051", description="HOST:PORT to serve gRPC on")
    database_url: str = Field(
        "sqlite+aiosqlite:///var/jobs.db",
        description="SQLAlchemy async URL: sqlite+aiosqlite:///PATH or postgresql+asyncpg://USER@HOST:PORT/DB",
    )
    gateway: str = Field("127.0.0.1:50052", description="HOST:PORT of AiGateway")
    workers: int = Field(10, ge=1, le=10_000, description="jobs run at once by this instance")
    lease: float = Field(60.0, gt=0, description="seconds a claim lasts without renewal")
    max_attempts: int = Field(3, ge=1, le=100, description="default attempts before FAILED")
    retry_base_delay: float = Field(2.0, ge=0, description="first retry delay, seconds")
    retry_max_delay: float = Field(300.0, ge=0, description="longest retry delay, seconds")
    deadline: float | None = Field(
        None, gt=0, description="gateway deadline for every job type, seconds"
    )
    deadline_card_analysis: float = Field(30.0, gt=0)
    deadline_til_generation: float = Field(60.0, gt=0)
    deadline_recall_generation: float = Field(60.0, gt=0)
    poll_interval: float = Field(1.0, gt=0, description="fallback poll for due jobs, seconds")
    batch_interval: float = Field(
        0.002,
        ge=0,
        le=1,
        description="under load, shortest time between two claims or enqueue commits, seconds",
    )
    grace: float = Field(30.0, ge=0, description="seconds in-flight jobs get to finish at shutdown")
    max_text_chars: int = Field(100_000, ge=1, description="longest input text accepted")
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
    instance_id: str = Field(default_factory=default_instance_id)
    log_level: str = Field("INFO")
    event_loop: Literal["uvloop", "asyncio"] = Field(
        "uvloop", description="uvloop, or asyncio's own loop"
    )

    @field_validator("listen", "gateway")
    @classmethod
    def _host_port(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(f"expected HOST:PORT, got {value!r}")
        return value

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

    def deadlines(self) -> dict[JobType, float]:
        if self.deadline is not None:
            return dict.fromkeys(JobType, self.deadline)
        return {
            JobType.CARD_ANALYSIS: self.deadline_card_analysis,
            JobType.TIL_GENERATION: self.deadline_til_generation,
            JobType.RECALL_GENERATION: self.deadline_recall_generation,
        }
