"""Bearer tokens: made at random, shown once, stored only as a SHA-256 hash, and
checked against the database through a short cache.

Why a plain SHA-256 and not a password hash (argon2, bcrypt): a token is 256 random
bits, not something a person chose, so there is no dictionary to try and a fast hash
is as good as a slow one against someone holding the table; and a fast hash lets
every RPC be checked in microseconds. The lookup is by hash (an index), and the hash
read back is compared with hmac.compare_digest, so no comparison leaks timing.

Revocation: a verdict (valid or not) is cached for at most CACHE_SECONDS (2 s), so a
token revoked in the database is refused by every instance within that time plus one
lookup, without a restart or any message between instances. Open streams are checked
again at that period too (auth/stream_checks.py), with a fresh look-up.

Expiry (`tokens create --expires-in`): a token past its expires_at is refused like a
revoked one, at once: the expiry travels with the cached verdict and is compared with
the wall clock on every check.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol

from san_jobs.job_service.auth.roles import Role
from san_jobs.job_service.storage.api_tokens import StoredToken

# A recognisable prefix: secret scanners and people can tell what leaked.
TOKEN_PREFIX = "sjt_"
TOKEN_BYTES = 32  # 256 bits of randomness
# Longer than any token we make: refused without hashing or a database look-up.
MAX_TOKEN_CHARS = 128
CACHE_SECONDS = 2.0
CACHE_ENTRIES = 10_000
ROLE_NAMES = frozenset(role.value for role in Role)


def new_token() -> str:
    """A fresh random token, e.g. sjt_Vq3... (4 + 43 characters)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)


def token_hash(token: str) -> str:
    """What api_tokens stores for `token`: its SHA-256, 64 hex digits."""
    return hashlib.sha256(token.encode()).hexdigest()


def looks_like_token(token: str) -> bool:
    """Has the shape of a token we made (a cheap filter before any look-up)."""
    return token.startswith(TOKEN_PREFIX) and len(token) <= MAX_TOKEN_CHARS


class TokenLookup(Protocol):
    """Where tokens are found by hash (storage.tokens.SqlTokenStore)."""

    async def find(self, token_hash: str) -> tuple[str, StoredToken] | None:
        """The stored hash and the token with hash `token_hash`, or None."""
        ...


def _utc_now() -> datetime:
    return datetime.now(UTC)


class TokenVerifier:
    """Says who a bearer token belongs to: the live token's name and role, or None.

    Verdicts are cached for `ttl` seconds (at most `max_entries` of them, the oldest
    dropped first), bad tokens too, so a flood of made-up tokens costs one look-up
    each per `ttl` at most. Concurrent checks of one token share one look-up.
    `clock` times the cache; `wall_clock` (UTC) is what expiry is compared with."""

    def __init__(
        self,
        store: TokenLookup,
        *,
        ttl: float = CACHE_SECONDS,
        max_entries: int = CACHE_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        self._store = store
        self._ttl = ttl
        self._max_entries = max_entries
        self._clock = clock
        self._wall_clock = wall_clock
        self._cache: dict[str, tuple[float, StoredToken | None]] = {}
        self._pending: dict[str, asyncio.Future[StoredToken | None]] = {}

    @property
    def cache_seconds(self) -> float:
        """How long a verdict is trusted: the longest a revoked token still works."""
        return self._ttl

    async def verify(self, token: str, *, fresh: bool = False) -> StoredToken | None:
        """The live token `token` is, or None (unknown, malformed, revoked or expired).
        `fresh`: look it up again whatever the cache holds (an open stream's periodic
        check, so that it ends within one period of a revocation). Storage errors
        propagate (the caller answers UNAVAILABLE)."""
        if not looks_like_token(token):
            return None
        digest = token_hash(token)
        cached = self._cache.get(digest)
        if not fresh and cached is not None and cached[0] > self._clock():
            return self._unexpired(cached[1])
        # One look-up per token at a time, in a task of its own: a caller that gives
        # up (a cancelled RPC) does not cancel it for the others waiting on it.
        look_up = self._pending.get(digest)
        if look_up is None:
            look_up = asyncio.ensure_future(self._look_up(digest))
            self._pending[digest] = look_up
            look_up.add_done_callback(lambda done: self._settle(digest, done))
        return self._unexpired(await asyncio.shield(look_up))

    def _unexpired(self, verdict: StoredToken | None) -> StoredToken | None:
        # The clock is read only for a token that can expire: most never do.
        if verdict is None or verdict.expires_at is None:
            return verdict
        return None if verdict.expired(self._wall_clock()) else verdict

    def _settle(self, digest: str, done: asyncio.Future[StoredToken | None]) -> None:
        del self._pending[digest]
        if not done.cancelled() and done.exception() is None:  # errors are not cached
            self._remember(digest, done.result())

    async def _look_up(self, digest: str) -> StoredToken | None:
        row = await self._store.find(digest)
        if row is None:
            return None
        stored_hash, stored = row
        if not hmac.compare_digest(stored_hash, digest) or stored.revoked:
            return None
        if stored.role not in ROLE_NAMES:
            return None  # a role this build does not know: no access at all
        return stored

    def _remember(self, digest: str, verdict: StoredToken | None) -> None:
        self._cache.pop(digest, None)
        while len(self._cache) >= self._max_entries:
            del self._cache[next(iter(self._cache))]
        self._cache[digest] = (self._clock() + self._ttl, verdict)
