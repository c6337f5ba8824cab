"""SQLite database files that only the service's own user can read.

SQLite creates a database file with the process umask (0644 under the usual 022),
and its -wal and -shm files with the database file's mode. So the database file is
made here first, 0600, in a directory made 0700 when this creates it: then all three
files are 0600, whatever the umask. An existing directory or file keeps its mode (the
operator may have chosen it); a mode that lets other users in is logged as a warning,
once per path and process.

Called where databases are created: job-service's start and `job-service migrate`
(server.prepare_database), san-web's start.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from sqlalchemy import make_url

log = logging.getLogger("san_shared.sqlite_files")

DIRECTORY_MODE = 0o700
FILE_MODE = 0o600
# SQLite's companion files of a WAL database (and of a rollback journal).
COMPANION_SUFFIXES = ("-wal", "-shm", "-journal")

_warned: set[Path] = set()


def prepare_sqlite_url(database_url: str) -> None:
    """`prepare_sqlite_file` for the database of a SQLAlchemy URL, if it is SQLite
    (any other database is left alone)."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        prepare_sqlite_file(url.database)


def prepare_sqlite_file(database: str | None) -> None:
    """Make sure the SQLite database file `database` (a path, as in the URL
    ``sqlite+aiosqlite:///PATH``) exists and is private: its directory is created
    0700 if missing, the file created 0600 if missing. In-memory databases and
    ``file:`` URIs are left alone. Warns once when an existing directory or file lets
    group or others in."""
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    path = Path(database)
    folder = path.parent
    try:
        folder.mkdir(mode=DIRECTORY_MODE, parents=True)
    except FileExistsError:
        _warn_if_shared(folder, "directory", f"chmod 700 {folder}")
    else:
        # mkdir's mode passes through the umask; say exactly what is meant.
        os.chmod(folder, DIRECTORY_MODE)
    try:
        # O_EXCL: never touch (or follow a link to) a file someone else made first.
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        for file in (path, *(Path(f"{path}{suffix}") for suffix in COMPANION_SUFFIXES)):
            _warn_if_shared(file, "file", f"chmod 600 {file}")
    else:
        # An empty file is an empty SQLite database; SQLite fills it in and makes the
        # -wal and -shm files with the same mode.
        os.fchmod(descriptor, FILE_MODE)
        os.close(descriptor)


def _warn_if_shared(path: Path, kind: str, remedy: str) -> None:
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return
    if mode & 0o077 and path not in _warned:
        _warned.add(path)
        log.warning(
            "SQLite database %s %s has mode %04o: other users of this machine may read "
            "or change it; run `%s` to keep it private",
            kind,
            path,
            mode,
            remedy,
        )
