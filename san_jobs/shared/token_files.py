"""Reading a bearer token from a file: jobsctl ``--token-file``, san-web
``--job-service-token-file``, job-service ``--gateway-token-file`` and ai-gateway
``--openai-api-key-file`` (the upstream's key is a bearer token too) read it the same
way. A file keeps the token out of ``ps`` and shell history."""

from __future__ import annotations

import os
from pathlib import Path

from san_jobs.shared.secret_files import shared_secret_warning


class TokenFileError(ValueError):
    """The token file cannot be used; the message says why in one line (and never
    quotes the file's content)."""


def read_token_file(path: str | os.PathLike[str], what: str = "token file") -> str:
    """The token in ``path``: the file's text without the white space around it (the
    line break ``echo TOKEN > FILE`` or an editor leaves). The rest must be one word
    an ``authorization`` header can carry (printable ASCII, no spaces): a token with
    a space or a foreign character inside is refused as such, at start, instead of
    being sent and turned away by the server. `what` names the file in errors."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
        raise TokenFileError(f"cannot read {what} {os.fspath(path)}: {reason}") from None
    token = text.strip()
    if not token:
        raise TokenFileError(f"{what} {os.fspath(path)} is empty")
    if not all("!" <= char <= "~" for char in token):
        raise TokenFileError(
            f"{what} {os.fspath(path)} must hold one token (printable ASCII, no spaces inside)"
        )
    return token


def token_file_warning(path: str | os.PathLike[str]) -> str | None:
    """A one-line warning when others than the owner may read ``path`` (as ssh says of
    a private key), or None. The file is still used: refusing would break set-ups that
    share a token through a group on purpose. The clients print it their own way
    (jobsctl on stderr, san-web in its log); the services log theirs
    (san_jobs.shared.secret_files)."""
    return shared_secret_warning(path, "token file")
