"""Passwords of san-web's users: argon2id hashes (argon2-cffi), never the password.

Verifying costs tens of milliseconds of CPU and 64 MiB of memory by design, so it runs
on a worker thread (the event loop keeps serving pages) and only a few at a time: a
burst of logins waits its turn instead of exhausting the machine's memory.
"""

from __future__ import annotations

import asyncio
import functools
import re

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

# Names are shown on the page and written to logs: plain, short, no control characters.
USERNAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
# argon2 takes any length, but hashing a megabyte per attempt is a cheap way to burn CPU.
MAX_PASSWORD_CHARS = 1024
# Set when a password is set (users create, users passwd), never at login: accounts made
# before the rule keep working. Length is what resists guessing (NIST SP 800-63B asks
# for at least 8, 15 for a password alone; 12 here, with the checks below); no rules
# about character classes, which push people to "Password1!".
MIN_PASSWORD_CHARS = 12
MIN_DISTINCT_CHARS = 5
# Names of this service: a password made of them is among the first guesses.
SERVICE_WORDS = ("san-web", "sanweb")
# The most common passwords of 12 characters or more in published breach lists (the
# shorter ones are refused by length already); compared case-insensitively.
COMMON_PASSWORDS = frozenset(
    {
        "123456789012", "1234567890123", "12345678901234", "123456789012345",
        "1234567890qwerty", "123456789abc", "1234qwerasdf", "1q2w3e4r5t6y",
        "1q2w3e4r5t6y7u8i", "1qaz2wsx3edc", "1qaz2wsx3edc4rfv", "abc123abc123",
        "abcd1234abcd", "abcdefghijkl", "administrator", "asdfghjkl123",
        "baseball1234", "changeme1234", "football1234", "iloveyou1234",
        "letmein12345", "monkey123456", "password1234", "password12345",
        "password123456", "password1234567", "passwordpassword", "princess1234",
        "q1w2e3r4t5y6", "qazwsxedcrfv", "qwerty123456", "qwertyuiop12",
        "qwertyuiop123", "qwertyuiopasdf", "sunshine1234", "superman1234",
        "trustno1trustno1", "welcome12345", "zaq12wsxcde3",
    }
)  # fmt: skip
CONCURRENT_VERIFICATIONS = 4

_hasher = PasswordHasher()  # argon2id with the library's RFC 9106 defaults


@functools.cache
def _dummy_hash() -> str:
    """Checked when the user does not exist, so that a wrong name takes as long as a
    wrong password and the timing does not tell which names exist. Made once, when
    the first PasswordChecker is (not at import: every san-web command, `--help`
    included, would pay an argon2 hash, 0.12 s, for it)."""
    return _hasher.hash("no such user: this hash is never matched")


def username_problem(name: str) -> str | None:
    """Why ``name`` cannot be a user name, or None."""
    if USERNAME_PATTERN.fullmatch(name) is None:
        return "a user name is 1 to 64 letters, digits or . _ @ -, starting with a letter or digit"
    return None


def password_problem(password: str, username: str | None = None) -> str | None:
    """Why ``password`` cannot be set (for ``username``, when given), or None."""
    if not password:
        return "the password must not be empty"
    if len(password) > MAX_PASSWORD_CHARS:
        return f"the password must be at most {MAX_PASSWORD_CHARS} characters"
    if len(password) < MIN_PASSWORD_CHARS:
        return f"the password must be at least {MIN_PASSWORD_CHARS} characters"
    folded = password.casefold()
    # A name of 1 or 2 characters is inside too many good passwords to refuse them.
    if username is not None and len(username) >= 3 and username.casefold() in folded:
        return "the password must not contain the user name"
    if any(word in folded for word in SERVICE_WORDS):
        return "the password must not contain the name of this service"
    if len(set(folded)) < MIN_DISTINCT_CHARS:
        return f"the password must have at least {MIN_DISTINCT_CHARS} different characters"
    if folded in COMMON_PASSWORDS:
        return "the password is one of the most common passwords"
    return None


def hash_password(password: str) -> str:
    """The argon2id hash (PHC string, salt and parameters included) to store."""
    return _hasher.hash(password)


def _verify(stored_hash: str | None, password: str) -> tuple[bool, str | None]:
    try:
        _hasher.verify(stored_hash or _dummy_hash(), password)
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False, None
    if stored_hash is None:
        return False, None
    # Parameters raised since this hash was made: the caller stores the new hash.
    rehash = _hasher.hash(password) if _hasher.check_needs_rehash(stored_hash) else None
    return True, rehash


class PasswordChecker:
    """Verifies passwords off the event loop, a few at a time (one per app)."""

    def __init__(self, concurrency: int = CONCURRENT_VERIFICATIONS, *, logins: bool = True) -> None:
        self._verifying = asyncio.Semaphore(concurrency)
        if logins:
            # Before the first login, so that it costs what the others cost. Only where
            # users log in (--auth password): a san-web without logins never verifies,
            # and its start need not pay an argon2 hash (0.15 s of CPU) for nothing.
            _dummy_hash()

    async def verify(self, stored_hash: str | None, password: str) -> tuple[bool, str | None]:
        """Whether ``password`` matches ``stored_hash`` (None: the user does not exist,
        and the answer is False after the same work), and a new hash to store when the
        parameters have changed since."""
        async with self._verifying:
            return await asyncio.to_thread(_verify, stored_hash, password)
