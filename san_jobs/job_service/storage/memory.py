"""MemoryJobStore: the JobStore port on jobs held in a dict, for tests that must run in
milliseconds (the worker's state machine) and as a third store under the storage
contract suite (tests/integration/storage), beside SQLite and PostgreSQL.

What a write does to a job comes from the transition declarations alone
(domain/transitions.py, applied by apply_transition.py). What they do not declare is
written here and matches SqlJobStore: which jobs a call picks (claim order, filters,
keyset pages), the unique rules (within a tenant: request_id; one active job per job
type and target), RetryFailed's skip reasons, stats, next_due_at, and the table's CHECK
constraints.

Single-process asyncio: each method yields once on entry (as a database round trip
would), then runs to its end without another await, so every call is atomic. Stores
made on one MemoryTable share their jobs, as SqlJobStores on one database do. Nothing
is notified: notifications are PostgreSQL's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from san_jobs.job_service.domain.ports import (
    JobStore,
)
from san_jobs.job_service.storage.memory_changes import MemoryChangeStore
from san_jobs.job_service.storage.memory_commands import MemoryJobCommands
from san_jobs.job_service.storage.memory_pauses import MemoryPauseStore
from san_jobs.job_service.storage.memory_queries import MemoryJobQueries
from san_jobs.job_service.storage.memory_retention import MemoryRetentionStore
from san_jobs.job_service.storage.memory_rows import (
    MemoryRows,
    MemoryTable,
)
from san_jobs.job_service.storage.memory_schedules import MemoryScheduleStore
from san_jobs.job_service.storage.memory_worker import MemoryWorkerStore
from san_jobs.job_service.storage.rows import utc_now


class MemoryJobStore(MemoryRows):
    """JobStore on a MemoryTable (a new one unless given). `clock` gives every
    timestamp, as SqlJobStore's does."""

    def __init__(
        self,
        *,
        clock: Callable[[], datetime] = utc_now,
        table: MemoryTable | None = None,
    ) -> None:
        super().__init__(clock=clock, table=table)
        # Its ports, each on the same table.
        self.worker = MemoryWorkerStore(clock=clock, table=self.table)
        self.pauses = MemoryPauseStore(clock=clock, table=self.table)
        self.retention = MemoryRetentionStore(clock=clock, table=self.table)
        self.queries = MemoryJobQueries(clock=clock, table=self.table)
        self.commands = MemoryJobCommands(clock=clock, table=self.table)
        self.changes = MemoryChangeStore(clock=clock, table=self.table)
        self.schedules = MemoryScheduleStore(commands=self.commands, clock=clock, table=self.table)

    async def close(self) -> None:
        await asyncio.sleep(0)

    async def ping(self) -> None:
        await asyncio.sleep(0)  # memory is always there


if TYPE_CHECKING:

    def _implements_the_port(store: MemoryJobStore) -> JobStore:
        """mypy checks here that MemoryJobStore has every method of the port."""
        return store
