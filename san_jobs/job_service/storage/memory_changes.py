"""MemoryChangeStore: the change feed's port (domain/ports.ChangeStore) on a MemoryTable,
as changes.py is on the databases. The table records a change at each write that is
one (memory_rows.MemoryRows._write, domain/changes.is_change), with its position at
once, as SQLite's trigger does; reads, the own-change test and retention as a prefix
match the SQL stores'."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from san_jobs.job_service.domain.changes import FeedState, JobChange
from san_jobs.job_service.domain.ports import PruneChangesParams, ReadChangesParams
from san_jobs.job_service.storage.memory_rows import MemoryRows


class MemoryChangeStore(MemoryRows):
    async def sequence_changes(self, limit: int) -> FeedState:
        await asyncio.sleep(0)  # every change has its position from its write
        return self.table.feed

    async def read_changes(self, params: ReadChangesParams) -> tuple[list[JobChange], FeedState]:
        await asyncio.sleep(0)
        wanted = params.change_filter
        changes = [
            change
            for _, change in self.table.changes
            if params.after_pos < change.pos <= params.through_pos and wanted.matches(change.job)
        ]
        return changes[: params.limit], self.table.feed

    async def is_own_change(self, pos: int, requested_by: str) -> bool:
        await asyncio.sleep(0)
        return any(
            change.pos == pos and change.job.requested_by == requested_by
            for _, change in self.table.changes
        )

    async def prune_changes(self, params: PruneChangesParams) -> int:
        """A prefix of at most `limit` positions, up to the first change made at or
        after the cutoff (which stays with every change after it)."""
        await asyncio.sleep(0)
        feed = self.table.feed
        window_end = min(feed.pruned_through + params.limit, feed.last_pos)
        through = window_end
        for changed_at, change in self.table.changes:
            if feed.pruned_through < change.pos <= window_end and changed_at >= params.cutoff:
                through = change.pos - 1
                break
        if through <= feed.pruned_through:
            return 0
        kept = [(at, change) for at, change in self.table.changes if change.pos > through]
        deleted = len(self.table.changes) - len(kept)
        self.table.changes = kept
        self.table.feed = replace(feed, pruned_through=through)
        return deleted
