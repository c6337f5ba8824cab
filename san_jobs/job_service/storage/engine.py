"""Async engines for SQLite (aiosqlite, WAL) and PostgreSQL (asyncpg)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from san_jobs.shared.sqlite_engine import (
    SQLITE_BEGIN_OPTION,
    SQLITE_BUSY_TIMEOUT_MS,
    configure_sqlite,
)

__all__ = ["SQLITE_BEGIN_OPTION", "create_engine", "normalize_url"]

# FULL: in WAL mode, every commit syncs the WAL to disk before it returns, so an
# acknowledged Enqueue survives a power loss or an OS crash (NORMAL syncs only at
# checkpoints: the last commits could be lost, though never corrupted).
SQLITE_SYNCHRONOUS = "FULL"


def normalize_url(database_url: str | URL) -> URL:
    """Pick the async driver for a plain `sqlite://` or `postgresql://` URL."""
    url = make_url(database_url)
    backend = url.get_backend_name()
    if backend == "sqlite" and url.get_driver_name() != "aiosqlite":
        url = url.set(drivername="sqlite+aiosqlite")
    elif backend in {"postgresql", "postgres"} and url.get_driver_name() != "asyncpg":
        url = url.set(drivername="postgresql+asyncpg")
    elif backend not in {"sqlite", "postgresql"}:
        raise ValueError(f"unsupported database URL {url.render_as_string()!r}")
    return url


def _json_dumps(value: Any) -> str:
    # Korean text stays readable in the database (and in operators' SQL).
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def create_engine(
    database_url: str | URL,
    *,
    pool_size: int = 10,
    max_overflow: int = 10,
    pool_timeout: float = 10.0,
    echo: bool = False,
    autocommit: bool = False,
) -> AsyncEngine:
    """An engine for `database_url`. PostgreSQL: a pool of `pool_size` (+ overflow)
    connections, opened as needed; with `autocommit`, every connection of the pool is
    in autocommit mode for good (cheaper per statement than switching a connection
    with execution_options at each checkout). SQLite: WAL, busy_timeout,
    synchronous=FULL, foreign keys, and transactions begun by SQLAlchemy (IMMEDIATE
    for writers, see SQLITE_BEGIN_OPTION). A new SQLite file is made private by
    whoever creates databases (job_service.sqlite_files), not here."""
    url = normalize_url(database_url)
    if url.get_backend_name() == "sqlite":
        engine = create_async_engine(url, echo=echo, json_serializer=_json_dumps)
        _setup_sqlite(engine)
        return engine
    return create_async_engine(
        url,
        echo=echo,
        json_serializer=_json_dumps,
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_timeout=pool_timeout,
        pool_recycle=1800,
        **({"isolation_level": "AUTOCOMMIT"} if autocommit else {}),
    )


def _setup_sqlite(engine: AsyncEngine) -> None:
    configure_sqlite(
        engine,
        [
            "journal_mode=WAL",
            f"busy_timeout={SQLITE_BUSY_TIMEOUT_MS}",
            f"synchronous={SQLITE_SYNCHRONOUS}",
            "foreign_keys=ON",
            # A dependent cancelled by migration 0017's trigger ends its own
            # dependents by the same trigger: SQLite lets a trigger fire itself only so.
            "recursive_triggers=ON",
        ],
        begin="DEFERRED",  # readers; writers ask for IMMEDIATE (connections.py)
    )
