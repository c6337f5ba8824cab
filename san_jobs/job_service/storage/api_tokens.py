"""SqlTokenStore: the one class that reads and writes `api_tokens`.

It stores and finds tokens by their hash only; making tokens, hashing them and deciding
what a role may do belong to san_jobs.job_service.auth. Driver errors surface as the project's
StorageError subclasses (storage/errors.py), as for jobs.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import RowMapping, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from san_jobs.job_service.domain.errors import StorageFailureError
from san_jobs.job_service.storage.errors import storage_errors
from san_jobs.job_service.storage.tables import api_tokens

t = api_tokens


class TokenNameTakenError(Exception):
    """A live (not revoked) token already has this name."""

    def __init__(self, name: str) -> None:
        super().__init__(f"a live token named {name!r} exists; revoke it first")
        self.name = name


@dataclass(frozen=True, slots=True)
class StoredToken:
    """One row of api_tokens, without its hash."""

    name: str
    role: str
    created_at: datetime
    revoked_at: datetime | None
    expires_at: datetime | None = None  # None: never

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    def expired(self, now: datetime) -> bool:
        """True once `now` has reached the token's expiry."""
        return self.expires_at is not None and now >= self.expires_at


def _token(row: RowMapping) -> StoredToken:
    return StoredToken(
        row["name"], row["role"], row["created_at"], row["revoked_at"], row["expires_at"]
    )


class SqlTokenStore:
    """api_tokens on an engine it does not own (the caller disposes of it)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def add(
        self,
        name: str,
        role: str,
        token_hash: str,
        now: datetime | None = None,
        *,
        expires_at: datetime | None = None,
    ) -> None:
        """Store a new live token, valid until `expires_at` (None: until revoked);
        TokenNameTakenError if `name` has a live one already.

        A token of `name` that has expired is retired first (its revoked_at set to
        its expiry, when it stopped working): an expired name can be given a new
        token without a `revoke`, as a revoked one can."""
        moment = now or datetime.now(UTC)
        values = {
            "id": str(uuid.uuid4()),
            "name": name,
            "role": role,
            "token_hash": token_hash,
            "created_at": moment,
            "expires_at": expires_at,
        }
        try:
            with storage_errors():
                async with self._engine.begin() as conn:
                    await conn.execute(
                        update(t)
                        .where(
                            t.c.name == name,
                            t.c.revoked_at.is_(None),
                            t.c.expires_at <= moment,
                        )
                        .values(revoked_at=t.c.expires_at)
                    )
                    await conn.execute(insert(t).values(**values))
        except StorageFailureError as error:
            # The partial unique index on live names said no (SQLSTATE class 23).
            if isinstance(error.__cause__, IntegrityError):
                raise TokenNameTakenError(name) from None
            raise

    async def list(self) -> list[StoredToken]:
        """Every token, live and revoked, oldest first."""
        with storage_errors():
            async with self._engine.connect() as conn:
                rows = await conn.execute(select(t).order_by(t.c.created_at, t.c.name))
                return [_token(row) for row in rows.mappings()]

    async def revoke(self, name: str, now: datetime | None = None) -> bool:
        """Revoke the live token named `name`; False when there is none."""
        with storage_errors():
            async with self._engine.begin() as conn:
                result = await conn.execute(
                    update(t)
                    .where(t.c.name == name, t.c.revoked_at.is_(None))
                    .values(revoked_at=now or datetime.now(UTC))
                    .returning(t.c.id)
                )
                return result.first() is not None

    async def find(self, token_hash: str) -> tuple[str, StoredToken] | None:
        """The stored hash and the token whose hash is `token_hash` (live or revoked),
        or None. The hash is given back so the caller can compare it itself."""
        with storage_errors():
            async with self._engine.connect() as conn:
                row = (
                    (await conn.execute(select(t).where(t.c.token_hash == token_hash)))
                    .mappings()
                    .first()
                )
        return None if row is None else (row["token_hash"], _token(row))
