"""Reading a bearer token from a file, for jobsctl ``--token-file`` and san-web
``--job-service-token-file``: a file keeps the token out of ``ps`` and shell history."""

from __future__ import annotations

import os
from pathlib import Path

from san_jobs.shared.secret_files import shared_secret_warning


class TokenFileError(Exception):
    """The token file cannot be used; the message says why in one line."""


def read_token_file(path: str | os.PathLike[str]) -> str:
    """The token in ``path``: the file's text without its trailing line break (what
    ``echo TOKEN > FILE`` or an editor leaves). Any other whitespace is kept, so a
    token that is wrong shows as wrong instead of being silently repaired."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
        raise TokenFileError(f"cannot read token file {os.fspath(path)}: {reason}") from None
    token = text.removesuffix("\n").removesuffix("\r")
    if not token:
        raise TokenFileError(f"token file {os.fspath(path)} is empty")
    return token


def token_file_warning(path: str | os.PathLike[str]) -> str | None:
    """A one-line warning when others than the owner may read ``path`` (as ssh says of
    a private key), or None. The file is still used: refusing would break set-ups that
    share a token through a group on purpose. The clients print it their own way
    (jobsctl on stderr, san-web in its log); the services log theirs
    (san_jobs.shared.secret_files)."""
    return shared_secret_warning(path, "token file")
