"""Dispatch pauses on the database: the rows of `dispatch_pauses` (domain/dispatch.py).

Each method is one statement on an autocommit connection (statements.py holds the SQL):
read by every instance about once a second, written only when a pause opens, is
renewed, probes or closes.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from san_jobs.job_service.domain.dispatch import DispatchPause, PauseReason
from san_jobs.job_service.domain.model import JobType
from san_jobs.job_service.storage.connections import Connections
from san_jobs.job_service.storage.rows import as_utc
from san_jobs.job_service.storage.statements import Statements


def row_to_pause(row: Any) -> DispatchPause:
    since, until = as_utc(row["since"]), as_utc(row["until"])
    assert since is not None and until is not None  # NOT NULL columns
    return DispatchPause(
        job_type=JobType(row["job_type"]),
        reason=PauseReason(row["reason"]),
        since=since,
        until=until,
        last_error=row["last_error"],
        opened_by=row["opened_by"],
    )


class PauseQueries:
    def __init__(
        self, connections: Connections, sql: Statements, now: Callable[[], datetime]
    ) -> None:
        self._db = connections
        self._sql = sql
        self._now = now

    async def _rows(self, statement: Any, params: dict[str, Any]) -> list[Any]:
        async with self._db.single() as conn:
            return list((await conn.execute(statement, params)).mappings())

    async def dispatch_pauses(self) -> list[DispatchPause]:
        return [row_to_pause(r) for r in await self._rows(self._sql.dispatch_pauses, {})]

    async def open_pause(
        self,
        job_type: JobType,
        reason: PauseReason,
        until: datetime,
        last_error: str,
        instance_id: str,
    ) -> DispatchPause:
        params = {
            "p_job_type": str(job_type),
            "p_reason": reason.value,
            "p_now": self._now(),
            "p_until": until,
            "p_last_error": last_error,
            "p_opened_by": instance_id,
        }
        (row,) = await self._rows(self._sql.open_pause, params)
        return row_to_pause(row)

    async def close_pause(self, job_type: JobType) -> bool:
        return bool(await self._rows(self._sql.close_pause, {"p_job_type": str(job_type)}))

    async def take_probe(self, job_type: JobType, next_probe_at: datetime) -> bool:
        params = {
            "p_job_type": str(job_type),
            "p_now": self._now(),
            "p_next_probe_at": next_probe_at,
        }
        return bool(await self._rows(self._sql.take_probe, params))
