"""The change feed's SQL (ports.ChangeStore): positions, reads, retention.

The rows are written by the database's trigger (migration 0013) in the transaction
that changes the job. On PostgreSQL they arrive without a position, because
transactions commit in another order than they write; `sequence_changes` gives
positions to committed rows only, while holding the feed row's lock, so the
positions any reader can see are a prefix with no gap (a change committed after a
reader's read gets a position after everything that reader saw).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, delete, func, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from san_jobs.job_service.domain.changes import FeedState, JobChange
from san_jobs.job_service.domain.ports import PruneChangesParams, ReadChangesParams
from san_jobs.job_service.storage.connections import Connections
from san_jobs.job_service.storage.rows import row_to_job
from san_jobs.job_service.storage.tables import job_change_feed, job_changes

_feed = job_change_feed.c
_changes = job_changes.c

FEED_STATE = select(_feed.feed_id, _feed.last_pos, _feed.pruned_through, _feed.cursor_key).where(
    _feed.id == 1
)

# One statement under the feed row's lock: number the committed rows that have no
# position in the order they were written, and move last_pos past them. READ
# COMMITTED gives this statement a snapshot taken after the lock was granted, so a
# row numbered by the previous holder is seen with its position (never renumbered).
SEQUENCE_PG = text(
    """
    WITH fresh AS (
        SELECT id, row_number() OVER (ORDER BY id) AS n
        FROM job_changes WHERE pos IS NULL ORDER BY id LIMIT :limit
    ), numbered AS (
        UPDATE job_changes c SET pos = :last_pos + fresh.n
        FROM fresh WHERE c.id = fresh.id AND c.pos IS NULL
        RETURNING c.pos
    )
    UPDATE job_change_feed
    SET last_pos = COALESCE((SELECT max(pos) FROM numbered), last_pos)
    WHERE id = 1
    RETURNING feed_id, last_pos, pruned_through, cursor_key
    """
)
_ANY_UNPOSITIONED = select(_changes.id).where(_changes.pos.is_(None)).limit(1)


def changes_query(params: ReadChangesParams) -> Any:
    """The positioned changes in (after_pos, through_pos] that match, by position: a
    range of uq_job_changes_pos, the filter applied to that range only."""
    wanted = params.change_filter
    conditions = [_changes.pos > params.after_pos, _changes.pos <= params.through_pos]
    if wanted.job_types:
        conditions.append(_changes.job_type.in_([t.value for t in wanted.job_types]))
    if wanted.statuses:
        conditions.append(_changes.status.in_([s.value for s in wanted.statuses]))
    if wanted.requested_by is not None:
        conditions.append(_changes.requested_by == wanted.requested_by)
    return select(job_changes).where(and_(*conditions)).order_by(_changes.pos).limit(params.limit)


def _state(row: Any) -> FeedState:
    return FeedState(row.feed_id, int(row.last_pos), int(row.pruned_through), row.cursor_key or "")


def _change(row: Any) -> JobChange:
    """A change's snapshot as the Job it was: its row names the job `job_id` and holds
    no input, lease or claim."""
    blank = {"id": row.job_id, "request_params": {}, "lease_expires_at": None, "claim_token": None}
    return JobChange(int(row.pos), row_to_job({**row._mapping, **blank}))


class SqlChangeStore:
    """The change feed's port on `job_changes` and `job_change_feed`."""

    def __init__(self, db: Connections) -> None:
        self._db = db

    async def sequence_changes(self, limit: int) -> FeedState:
        if self._db.pg:
            async with self._db.single() as conn:
                if (await conn.execute(_ANY_UNPOSITIONED)).first() is None:
                    return _state((await conn.execute(FEED_STATE)).one())
            async with self._db.tx() as conn:
                locked = (await conn.execute(FEED_STATE.with_for_update())).one()
                row = (
                    await conn.execute(SEQUENCE_PG, {"limit": limit, "last_pos": locked.last_pos})
                ).one()
                return _state(row)
        async with self._db.single() as conn:
            return _state((await conn.execute(FEED_STATE)).one())

    async def read_changes(self, params: ReadChangesParams) -> tuple[list[JobChange], FeedState]:
        stmt = changes_query(params)
        async with self._db.single() as conn:
            changes = [_change(row) for row in await conn.execute(stmt)]
            # After the rows: a prune that committed before them shows here.
            state = _state((await conn.execute(FEED_STATE)).one())
        return changes, state

    async def is_own_change(self, pos: int, requested_by: str) -> bool:
        found = select(_changes.pos).where(
            and_(_changes.pos == pos, _changes.requested_by == requested_by)
        )
        async with self._db.single() as conn:
            return (await conn.execute(found)).first() is not None

    async def prune_changes(self, params: PruneChangesParams) -> int:
        async with self._db.tx() as conn:
            feed = (await conn.execute(FEED_STATE.with_for_update())).one()
            window_end = min(feed.pruned_through + params.limit, feed.last_pos)
            if window_end <= feed.pruned_through:
                return 0
            through = await _prunable_through(conn, feed.pruned_through, window_end, params)
            if through <= feed.pruned_through:
                return 0
            deleted = await conn.execute(
                delete(job_changes).where(
                    _changes.pos > feed.pruned_through, _changes.pos <= through
                )
            )
            await conn.execute(
                update(job_change_feed).where(_feed.id == 1).values(pruned_through=through)
            )
            return int(deleted.rowcount or 0)


async def _prunable_through(
    conn: AsyncConnection, pruned_through: int, window_end: int, params: PruneChangesParams
) -> int:
    """The last position of the prefix (pruned_through, window_end] made before the
    cutoff: up to the first change made after it, which stays with all after it."""
    first_kept = (
        await conn.execute(
            select(func.min(_changes.pos)).where(
                _changes.pos > pruned_through,
                _changes.pos <= window_end,
                _changes.changed_at >= params.cutoff,
            )
        )
    ).scalar()
    return window_end if first_kept is None else int(first_kept) - 1
