"""Files that hold a secret (a TLS private key, a token, an API key) and that other
users of the machine can read: said once, at start, in one line that names the file
and the fix, as ssh does of a private key.

The file is still used: refusing would break set-ups that share a secret through a
group on purpose, and a warning is enough to make the choice a conscious one.

Standard library only: the clients (jobsctl, san-web) use it too.
"""

from __future__ import annotations

import logging
import os
import stat
import threading

log = logging.getLogger("san_shared.secret_files")

# Group and others, any of read, write or execute: ssh's rule for a private key.
_SHARED_BITS = stat.S_IRWXG | stat.S_IRWXO

_warned: set[str] = set()
_warned_lock = threading.Lock()


def shared_secret_warning(path: str | os.PathLike[str], what: str) -> str | None:
    """``"<what> <path> is accessible by others (mode 0644); run: chmod 600 <path>"``
    when users other than the owner may use ``path``, else None (also when it cannot
    be read: whoever reads it reports that)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if not mode & _SHARED_BITS:
        return None
    name = os.fspath(path)
    return (
        f"{what} {name} is accessible by others (mode {stat.S_IMODE(mode):04o}); "
        f"run: chmod 600 {name}"
    )


def warn_if_shared(path: str | os.PathLike[str], what: str) -> None:
    """Log :func:`shared_secret_warning` as a warning, once per file and process (a
    file read at start and again on every reload is told about once)."""
    warning = shared_secret_warning(path, what)
    if warning is None:
        return
    key = os.path.abspath(path)
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning("%s", warning)
