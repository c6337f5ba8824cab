"""MemoryRetentionStore: the retention port (domain/ports.RetentionStore) on a
MemoryTable (storage/prune.py is the SQL twin); the pruners' lock is a flag on the
table, shared by its stores as PostgreSQL's advisory lock is by instances."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime

from san_jobs.job_service.domain.model import TERMINAL_STATUSES, JobStatus
from san_jobs.job_service.domain.ports import CountPrunableParams, PruneBatchParams
from san_jobs.job_service.storage.apply_transition import Row, status_of
from san_jobs.job_service.storage.memory_rows import MemoryRows
from san_jobs.job_service.storage.rows import aware


class MemoryRetentionStore(MemoryRows):
    def _past(self, status: JobStatus, cutoff: datetime) -> list[Row]:
        """Jobs of terminal `status` that ended (updated_at) before `cutoff`, oldest first."""
        if status not in TERMINAL_STATUSES:
            raise ValueError(f"only terminal jobs are pruned, not {status.value}")
        cutoff = aware(cutoff)
        rows = [
            row
            for row in self._rows.values()
            if status_of(row) is status and row["updated_at"] < cutoff
        ]
        return sorted(rows, key=lambda row: row["updated_at"])

    async def count_prunable(self, params: CountPrunableParams) -> dict[JobStatus, int]:
        await asyncio.sleep(0)
        limit = max(0, params.limit)
        return {s: min(len(self._past(s, c)), limit) for s, c in params.cutoffs.items()}

    async def prune_batch(self, params: PruneBatchParams) -> int:
        await asyncio.sleep(0)
        chosen = self._past(params.status, params.cutoff)[: max(0, params.limit)]
        for row in chosen:
            del self._rows[row["id"]]
        return len(chosen)

    @asynccontextmanager
    async def prune_lock(self) -> AsyncIterator[bool]:
        await asyncio.sleep(0)
        if self.table.prune_locked:
            yield False
            return
        self.table.prune_locked = True
        try:
            yield True
        finally:
            self.table.prune_locked = False
