"""Passwords of san-web's users: argon2id hashes (argon2-cffi), never the password.

Verifying costs tens of milliseconds of CPU and 64 MiB of memory by design, so it runs
on a worker thread (the event loop keeps serving pages) and only a few at a time: a
burst of logins waits its turn instead of exhausting the machine's memory.
"""

from __future__ import annotations

import asyncio
import re

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

# Names are shown on the page and written to logs: plain, short, no control characters.
USERNAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
# argon2 takes any length, but hashing a megabyte per attempt is a cheap way to burn CPU.
MAX_PASSWORD_CHARS = 1024
CONCURRENT_VERIFICATIONS = 4

_hasher = PasswordHasher()  # argon2id with the library's RFC 9106 defaults
# Checked when the user does not exist, so that a wrong name takes as long as a wrong
# password and the timing does not tell which names exist.
_DUMMY_HASH = _hasher.hash("no such user: this hash is never matched")


def username_problem(name: str) -> str | None:
    """Why ``name`` cannot be a user name, or None."""
    if USERNAME_PATTERN.fullmatch(name) is None:
        return "a user name is 1 to 64 letters, digits or . _ @ -, starting with a letter or digit"
    return None


def password_problem(password: str) -> str | None:
    """Why ``password`` cannot be set, or None."""
    if not password:
        return "the password must not be empty"
    if len(password) > MAX_PASSWORD_CHARS:
        return f"the password must be at most {MAX_PASSWORD_CHARS} characters"
    return None


def hash_password(password: str) -> str:
    """The argon2id hash (PHC string, salt and parameters included) to store."""
    return _hasher.hash(password)


def _verify(stored_hash: str | None, password: str) -> tuple[bool, str | None]:
    try:
        _hasher.verify(stored_hash or _DUMMY_HASH, password)
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False, None
    if stored_hash is None:
        return False, None
    # Parameters raised since this hash was made: the caller stores the new hash.
    rehash = _hasher.hash(password) if _hasher.check_needs_rehash(stored_hash) else None
    return True, rehash


class PasswordChecker:
    """Verifies passwords off the event loop, a few at a time (one per app)."""

    def __init__(self, concurrency: int = CONCURRENT_VERIFICATIONS) -> None:
        self._verifying = asyncio.Semaphore(concurrency)

    async def verify(self, stored_hash: str | None, password: str) -> tuple[bool, str | None]:
        """Whether ``password`` matches ``stored_hash`` (None: the user does not exist,
        and the answer is False after the same work), and a new hash to store when the
        parameters have changed since."""
        async with self._verifying:
            return await asyncio.to_thread(_verify, stored_hash, password)
