"""Driver errors become the service's own exceptions here, at the storage boundary,
each classified by what it means rather than guessed:

- StorageUnavailableError: the database cannot be reached (a lost or refused
  connection, SQLSTATE class 08, 57P01-57P03 shutdown / starting up, 53300 too many
  connections, an OSError, the pool's timeout, SQLite's "database is locked" or a
  file it cannot open), or it gave up on lock contention (class 40, 55P03, 57014).
  Worth retrying.
- StorageDataError: the database refused a value (class 22, asyncpg's client-side
  DataError, SQLite's "string or blob too big", an int too large to bind).
- StorageFailureError: everything else, e.g. an integrity violation nothing handled
  (class 23 reaching here), an unknown table or column, a driver misused.

The exception's text (the driver's words, never the SQL or its parameters) is for
the log; the transport shows callers a fixed message per class.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy.exc import DBAPIError, DisconnectionError, StatementError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from san_jobs.job_service.domain.errors import (
    JobServiceError,
    StorageDataError,
    StorageError,
    StorageFailureError,
    StorageUnavailableError,
)

_DRIVER_ERRORS: tuple[type[BaseException], ...] = (
    StatementError,  # DBAPIError (IntegrityError, OperationalError, ...) and bind errors
    DisconnectionError,
    PoolTimeoutError,  # no connection free in the pool in time
    OSError,  # connection refused, reset, timed out (raised raw by some drivers)
    OverflowError,  # sqlite3: a Python int too large to bind
    sqlite3.Error,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
)

# SQLSTATEs (or their two-character classes) that mean "the database is not there
# for us right now": connection exceptions, shutdown or start-up, too many
# connections; and lock contention that ends by itself (serialization failure,
# deadlock, lock not available, statement timeout / cancel).
_UNAVAILABLE_CLASSES = frozenset({"08", "40"})
_UNAVAILABLE_STATES = frozenset({"57P01", "57P02", "57P03", "53300", "55P03", "57014"})
_DATA_CLASS = "22"

# SQLite's primary result codes (the low byte of sqlite_errorcode).
_SQLITE_UNAVAILABLE = frozenset({5, 6, 10, 14})  # BUSY, LOCKED, IOERR, CANTOPEN
_SQLITE_DATA = frozenset({18, 20, 25})  # TOOBIG, MISMATCH, RANGE
_SQLITE_UNAVAILABLE_TEXT = ("database is locked", "database is busy", "unable to open database")

# asyncpg's client-side "cannot encode this argument" (asyncpg.exceptions.DataError
# is the server's class 22 instead, found by its SQLSTATE).
_ClientDataError: type[Exception] = asyncpg.exceptions._base.DataError

_LOG_PREFIX: dict[type[StorageError], str] = {
    StorageUnavailableError: "database unavailable",
    StorageDataError: "database refused a value",
    StorageFailureError: "database error",
}
MAX_DESCRIPTION_CHARS = 300


# What asyncpg says when a statement comes to a connection whose protocol is still
# consuming an error the server sent on its own ("another operation (2)": its error-
# consuming state): the server has ended that session (a shutdown, a terminated
# backend) and the socket's end has not been read yet. Said in the operator's words,
# since the driver's read like a bug of ours; another state in its place would be two
# operations on one connection, a bug of ours, and keeps the driver's words.
_ENDED_BY_SERVER = re.compile(r"cannot switch to state \d+; another operation \(2\) is in progress")
_ENDED_BY_SERVER_TEXT = "the server had ended this connection (statement not sent)"


def describe(exc: BaseException) -> str:
    """A short description for the log, without the SQL text or its parameters."""
    if any(_ENDED_BY_SERVER.search(str(e)) for e in _chain(exc)):
        return _ENDED_BY_SERVER_TEXT
    orig = getattr(exc, "orig", None) or exc
    text = f"{type(orig).__name__}: {orig}".strip()
    return text if len(text) <= MAX_DESCRIPTION_CHARS else text[:MAX_DESCRIPTION_CHARS] + "..."


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, the driver error SQLAlchemy wrapped (`orig`), and their causes."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop(0)
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        # Not __context__: an error merely raised while handling another says
        # nothing about this one.
        pending += [getattr(current, "orig", None), current.__cause__]


def sqlstate(exc: BaseException) -> str | None:
    """The PostgreSQL SQLSTATE behind `exc` (asyncpg's, or as SQLAlchemy's asyncpg
    adapter copied it), if any."""
    for error in _chain(exc):
        state = getattr(error, "sqlstate", None)
        if isinstance(state, str) and len(state) == 5:
            return state
    return None


def _sqlite_error(exc: BaseException) -> sqlite3.Error | None:
    return next((e for e in _chain(exc) if isinstance(e, sqlite3.Error)), None)


# asyncpg's messages for a statement refused before anything was written to the
# socket: the connection is closed, busy with another operation, or still busy with
# the aftermath of an error the server sent on its own (e.g. "terminating connection
# due to administrator command" on an idle connection during a shutdown). Nothing was
# stored; the connection is not usable now.
NOT_SENT_MESSAGES = ("cannot switch to state", "not connected", "cannot perform operation")


def refused_before_sending(exc: BaseException) -> bool:
    """True when asyncpg refused the statement before sending any of it."""
    if isinstance(exc, asyncpg.exceptions.ConnectionDoesNotExistError):
        return False  # "closed in the middle of operation": it may have run
    if isinstance(exc, asyncpg.InterfaceError | asyncpg.exceptions.InternalClientError):
        return str(exc).startswith(NOT_SENT_MESSAGES)
    return False


def _is_connection_loss(exc: BaseException) -> bool:
    if isinstance(exc, DisconnectionError | PoolTimeoutError | OSError):
        return True
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True  # SQLAlchemy's dialect judged it a disconnect
    for error in _chain(exc):
        if isinstance(error, OSError | asyncpg.PostgresConnectionError):
            return True
        if isinstance(error, asyncpg.InterfaceError) and "connection is closed" in str(error):
            return True
        if refused_before_sending(error):
            return True
    return False


def _error_class(exc: BaseException) -> type[StorageError]:
    """Which of the service's storage errors `exc` is."""
    if _is_connection_loss(exc):
        return StorageUnavailableError
    state = sqlstate(exc)
    if state is not None:
        if state[:2] in _UNAVAILABLE_CLASSES or state in _UNAVAILABLE_STATES:
            return StorageUnavailableError
        return StorageDataError if state[:2] == _DATA_CLASS else StorageFailureError
    sqlite_error = _sqlite_error(exc)
    if sqlite_error is not None:
        code = (getattr(sqlite_error, "sqlite_errorcode", None) or 0) & 0xFF
        text = str(sqlite_error).lower()
        if code in _SQLITE_UNAVAILABLE or any(t in text for t in _SQLITE_UNAVAILABLE_TEXT):
            return StorageUnavailableError
        if code in _SQLITE_DATA or isinstance(sqlite_error, sqlite3.DataError):
            return StorageDataError
        return StorageFailureError
    if any(isinstance(e, OverflowError | _ClientDataError) for e in _chain(exc)):
        return StorageDataError  # a value the driver could not even encode
    return StorageFailureError


def classify(exc: BaseException) -> StorageError:
    """The service's storage error for the driver error `exc` (its details in str())."""
    kind = _error_class(exc)
    return kind(f"{_LOG_PREFIX[kind]}: {describe(exc)}")


@contextmanager
def storage_errors() -> Iterator[None]:
    """Turn any driver or connection error raised inside into a StorageError subclass,
    classified by `classify`; the service's own errors pass through unchanged."""
    try:
        yield
    except JobServiceError:
        raise
    except _DRIVER_ERRORS as exc:
        raise classify(exc) from exc
