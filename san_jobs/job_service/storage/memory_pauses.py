"""MemoryPauseStore: the pause port (domain/ports.PauseStore) on a MemoryTable, one dict
entry per paused type as one row in SQL (storage/pauses.py is the SQL twin)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from san_jobs.job_service.domain.dispatch import DispatchPause
from san_jobs.job_service.domain.model import JobType
from san_jobs.job_service.domain.ports import OpenPauseParams, TakeProbeParams
from san_jobs.job_service.storage.memory_rows import MemoryRows
from san_jobs.job_service.storage.rows import aware


class MemoryPauseStore(MemoryRows):
    async def dispatch_pauses(self) -> list[DispatchPause]:
        await asyncio.sleep(0)
        return sorted(self.table.pauses.values(), key=lambda p: str(p.job_type))

    async def open_pause(self, params: OpenPauseParams) -> DispatchPause:
        await asyncio.sleep(0)
        job_type, reason, until = params.job_type, params.reason, params.until
        last_error, instance_id = params.last_error, params.instance_id
        current = self.table.pauses.get(job_type)
        since = current.since if current is not None else aware(self._clock())
        pause = DispatchPause(job_type, reason, since, aware(until), last_error, instance_id)
        self.table.pauses[job_type] = pause
        return pause

    async def close_pause(self, job_type: JobType) -> bool:
        await asyncio.sleep(0)
        return self.table.pauses.pop(job_type, None) is not None

    async def take_probe(self, params: TakeProbeParams) -> bool:
        await asyncio.sleep(0)
        current = self.table.pauses.get(params.job_type)
        if current is None or current.until > aware(self._clock()):
            return False
        self.table.pauses[params.job_type] = replace(current, until=aware(params.next_probe_at))
        return True
