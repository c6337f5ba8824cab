"""Driver errors become the service's own exceptions here, at the storage boundary."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy.exc import DBAPIError, DisconnectionError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from job_service.domain.errors import StorageUnavailableError

_DRIVER_ERRORS: tuple[type[BaseException], ...] = (
    DBAPIError,  # OperationalError, InterfaceError, ... (IntegrityError is handled first)
    DisconnectionError,
    PoolTimeoutError,  # no connection free in the pool in time
    OSError,  # connection refused, reset, timed out (raised raw by some drivers)
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
)


def describe(exc: BaseException) -> str:
    """A short description without the SQL text or its parameters."""
    orig = getattr(exc, "orig", None) or exc
    text = f"{type(orig).__name__}: {orig}".strip()
    return text if len(text) <= 300 else text[:300] + "..."


@contextmanager
def storage_errors() -> Iterator[None]:
    """Turn any driver or connection error raised inside into StorageUnavailableError."""
    try:
        yield
    except _DRIVER_ERRORS as exc:
        raise StorageUnavailableError(f"database unavailable: {describe(exc)}") from exc
