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
from san_jobs.job_service.domain.ports import OpenPauseParams, TakeProbeParams
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


class SqlPauseStore:
    """The pause port (domain/ports.PauseStore) on the `dispatch_pauses` table."""

    def __init__(self, *, db: Connections, sql: Statements, now: Callable[[], datetime]) -> None:
        self._db = db
        self._sql = sql
        self._now = now

    async def _pause_rows(self, statement: Any, params: dict[str, Any]) -> list[Any]:
        async with self._db.single() as conn:
            return list((await conn.execute(statement, params)).mappings())

    async def dispatch_pauses(self) -> list[DispatchPause]:
        return [row_to_pause(r) for r in await self._pause_rows(self._sql.dispatch_pauses, {})]

    async def open_pause(self, params: OpenPauseParams) -> DispatchPause:
        bound = {
            "p_job_type": str(params.job_type),
            "p_reason": params.reason.value,
            "p_now": self._now(),
            "p_until": params.until,
            "p_last_error": params.last_error,
            "p_opened_by": params.instance_id,
        }
        (row,) = await self._pause_rows(self._sql.open_pause, bound)
        return row_to_pause(row)

    async def close_pause(self, job_type: JobType) -> bool:
        return bool(await self._pause_rows(self._sql.close_pause, {"p_job_type": str(job_type)}))

    async def take_probe(self, params: TakeProbeParams) -> bool:
        bound = {
            "p_job_type": str(params.job_type),
            "p_now": self._now(),
            "p_next_probe_at": params.next_probe_at,
        }
        return bool(await self._pause_rows(self._sql.take_probe, bound))
