"""TokenVerifier's cache: how long a verdict lives, one look-up for many callers,
and a caller that gives up not spoiling the look-up for the others."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from san_jobs.job_service.auth.bearer_tokens import TokenVerifier, new_token, token_hash
from san_jobs.job_service.storage.api_tokens import StoredToken


class FakeTokens:
    """A TokenLookup in memory that counts look-ups; `gate` holds them while set."""

    def __init__(self) -> None:
        self.rows: dict[str, StoredToken] = {}
        self.look_ups = 0
        self.gate: asyncio.Event | None = None

    def add(self, token: str, role: str = "viewer") -> None:
        self.rows[token_hash(token)] = StoredToken("someone", role, datetime.now(UTC), None)

    def revoke(self, token: str) -> None:
        row = self.rows[token_hash(token)]
        self.rows[token_hash(token)] = StoredToken(
            row.name, row.role, row.created_at, datetime.now(UTC)
        )

    async def find(self, digest: str) -> tuple[str, StoredToken] | None:
        self.look_ups += 1
        if self.gate is not None:
            await self.gate.wait()
        row = self.rows.get(digest)
        return None if row is None else (digest, row)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_a_revocation_is_seen_once_the_verdict_expires() -> None:
    tokens, clock = FakeTokens(), Clock()
    verifier = TokenVerifier(tokens, ttl=2.0, clock=clock)
    token = new_token()
    tokens.add(token)
    assert (await verifier.verify(token)) is not None
    tokens.revoke(token)
    clock.now += 1.9
    assert (await verifier.verify(token)) is not None  # still the cached verdict
    clock.now += 0.2
    assert (await verifier.verify(token)) is None
    assert tokens.look_ups == 2


async def test_bad_tokens_are_cached_and_malformed_ones_never_looked_up() -> None:
    tokens, clock = FakeTokens(), Clock()
    verifier = TokenVerifier(tokens, clock=clock)
    made_up = new_token()
    assert await verifier.verify(made_up) is None
    assert await verifier.verify(made_up) is None
    assert await verifier.verify("not-a-token") is None
    assert await verifier.verify("sjt_" + "x" * 500) is None
    assert tokens.look_ups == 1


async def test_an_unknown_role_gets_nothing() -> None:
    tokens = FakeTokens()
    token = new_token()
    tokens.add(token, role="admin")
    assert await TokenVerifier(tokens).verify(token) is None


async def test_concurrent_checks_share_one_look_up_that_survives_a_cancelled_caller() -> None:
    tokens = FakeTokens()
    tokens.gate = asyncio.Event()
    token = new_token()
    tokens.add(token)
    verifier = TokenVerifier(tokens)
    callers = [asyncio.ensure_future(verifier.verify(token)) for _ in range(10)]
    await asyncio.sleep(0)
    callers[0].cancel()  # the first caller, whose call started the look-up, gives up
    tokens.gate.set()
    results = await asyncio.gather(*callers[1:])
    assert all(result is not None and result.name == "someone" for result in results)
    assert tokens.look_ups == 1
