"""The claim of a job type with limits (domain/claim_limits.py), on the database.

One transaction per claim: lock the type's bucket row (PostgreSQL; SQLite has one
instance and one writer), count the type's running jobs, claim what the limits allow
with the ordinary claim statement (only_type), and put back the tokens not used. The
lock makes instances claiming the same limited type take turns, so neither the tokens
nor the running count can be spent twice. Unlimited types never come here.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from san_jobs.job_service.domain.claim_limits import (
    LimitedClaim,
    TypeLimit,
    allowance,
    refilled,
    wait_after,
)
from san_jobs.job_service.domain.model import Claim
from san_jobs.job_service.domain.ports import LimitedClaimParams
from san_jobs.job_service.domain.transitions import claim_type_args
from san_jobs.job_service.storage.connections import StoreParts
from san_jobs.job_service.storage.rows import as_utc
from san_jobs.job_service.storage.statements import (
    HOT_SESSION,
    P_LIMIT,
    P_MAX_PER_CALLER,
)
from san_jobs.job_service.storage.transition_sql import Params, time_params


class LimitedClaims(StoreParts):
    async def _merge_inputs(self, claims: list[Claim]) -> list[Claim]:
        """Claimed jobs that take their dependencies' results, with them (dependencies.py)."""
        raise NotImplementedError

    async def claim_limited(self, params: LimitedClaimParams) -> LimitedClaim:
        if params.limit <= 0:
            return LimitedClaim()
        type_limit = params.type_limit
        key = {"p_job_type": str(params.job_type)}
        async with self._db.tx() as conn:
            if self._db.pg:
                # The claim's plan, as on the hot connection (statements.HOT_SESSION).
                for setting in HOT_SESSION:
                    await conn.execute(text(setting.replace("SET ", "SET LOCAL ", 1)))
            tokens, now = await self._tokens(conn, key, type_limit)
            running = 0
            started_at = now
            if type_limit.max_running is not None:
                count = await conn.execute(self._sql.running_of_type, key)
                running = int(count.scalar_one())
                # The claim's attempts start after the count that found their slots
                # free: a completion that committed just before it ended before they
                # start, so the attempts' records never show more running at once
                # than the limit (dated at `now`, they could, by a whole batch).
                started_at = self._now()
            allowed = allowance(params.limit, type_limit, tokens, running)
            claims = await self._claim_of_type(conn, params, allowed.jobs, started_at)
            tokens_left = None
            if tokens is not None:
                tokens_left = tokens - len(claims)
                spent = key | {"p_tokens": tokens_left, "p_now": now}
                await conn.execute(self._sql.spend_tokens, spent)
        # After the transaction (on SQLite it holds the one write lock): a job that
        # takes its dependencies' results gets them (dependencies.py).
        claims = await self._merge_inputs(claims)
        return LimitedClaim(claims, wait_after(len(claims), allowed, tokens_left, type_limit))

    async def _tokens(
        self, conn: AsyncConnection, key: dict[str, str], type_limit: TypeLimit
    ) -> tuple[float | None, datetime]:
        """Lock the type's bucket row (made on first use; a type with a concurrency
        limit alone has one too, for the lock); its tokens now (None without a rate
        limit), and the time of the claim: read once the lock is held, so that an
        instance that waited for it neither refills the bucket for time already
        counted nor dates its starts early."""
        row = (await conn.execute(self._sql.bucket, key)).first()
        if row is None:
            # Two instances may race here: the insert does nothing for the second,
            # whose select then waits on the lock.
            full = type_limit.burst if type_limit.per_second is not None else 0.0
            params = key | {"p_tokens": full, "p_now": self._now()}
            await conn.execute(self._sql.new_bucket, params)
            row = (await conn.execute(self._sql.bucket, key)).one()
        now = self._now()
        if type_limit.per_second is None:
            return None, now
        refilled_at = as_utc(row.refilled_at)
        assert refilled_at is not None  # NOT NULL
        return refilled(float(row.tokens), refilled_at, now, type_limit), now

    async def _claim_of_type(
        self, conn: AsyncConnection, params: LimitedClaimParams, jobs: int, now: datetime
    ) -> list[Claim]:
        if jobs <= 0:
            return []
        types = Params.bind(**claim_type_args((), params.job_type))
        bound = time_params(now, params.lease_seconds) | {P_LIMIT: jobs} | types
        # By age or by priority: the anti-starvation share (domain/priorities.py).
        by_age = self._age_share.next_by_age()
        statement = self._sql.claim if by_age else self._sql.claim_urgent
        if params.max_per_caller is not None:  # fair share (Statements._fair_claim)
            statement = self._sql.claim_fair if by_age else self._sql.claim_fair_urgent
            bound |= {P_MAX_PER_CALLER: params.max_per_caller}
        claimed = await self._db.jobs(conn, statement, bound)
        self._age_share.took(len(claimed), by_age)
        claimed.sort(key=lambda j: (j.created_at, j.id))
        return [Claim(job=j, token=j.claim_token or "") for j in claimed]
