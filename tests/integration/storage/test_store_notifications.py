"""PostgreSQL LISTEN/NOTIFY between JobService instances."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import asyncpg  # type: ignore[import-untyped]
import pytest
from _storage_support import enqueue

from san_jobs.job_service.domain.errors import DuplicateJobError
from san_jobs.job_service.domain.ports import ClaimParams, CompleteParams
from san_jobs.job_service.storage.notify import (
    CHANNEL,
    FIELD_SEPARATOR,
    ID_SEPARATOR,
    IDS_PER_NOTIFICATION,
    MAX_PAYLOAD_BYTES,
    PgChangeListener,
    asyncpg_dsn,
    payload_prefix,
)
from san_jobs.job_service.storage.repository import SqlJobStore
from tests.support.clock import FakeClock

pytestmark = pytest.mark.postgres


class Recorder:
    def __init__(self) -> None:
        self.changes: list[tuple[str, str, list[str]]] = []
        self.reconnects = 0
        self.event = asyncio.Event()

    async def on_change(self, origin: str, status: str, ids: list[str]) -> None:
        self.changes.append((origin, status, ids))
        self.event.set()

    def on_reconnect(self) -> None:
        self.reconnects += 1
        self.event.set()

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        async with asyncio.timeout(5):
            while not predicate():
                self.event.clear()
                await self.event.wait()


async def test_writes_of_one_instance_reach_the_other_listener(
    clean_postgres_url: str, clock: FakeClock
) -> None:
    a = SqlJobStore(clean_postgres_url, instance_id="instance-a", clock=clock)
    b = SqlJobStore(clean_postgres_url, instance_id="instance-b", clock=clock)
    rec = Recorder()
    listener = PgChangeListener(clean_postgres_url, rec.on_change, on_reconnect=rec.on_reconnect)
    await listener.start()
    try:
        job = await enqueue(a, "n1")
        (claim,) = await b.worker.claim(ClaimParams(limit=5, lease_seconds=60))
        await b.worker.complete(
            CompleteParams(job_id=claim.job.id, token=claim.token, result={"summary": "ok"})
        )
        await rec.wait_for(lambda: len(rec.changes) >= 3)
        assert rec.changes == [
            ("instance-a", "PENDING", [job.id]),
            ("instance-b", "PROCESSING", [job.id]),
            ("instance-b", "COMPLETED", [job.id]),
        ]
    finally:
        await listener.stop()
        await a.close()
        await b.close()


async def test_a_listener_can_leave_out_its_own_instance(
    clean_postgres_url: str, clock: FakeClock
) -> None:
    me = SqlJobStore(clean_postgres_url, instance_id="me", clock=clock)
    other = SqlJobStore(clean_postgres_url, instance_id="other", clock=clock)
    rec = Recorder()
    listener = PgChangeListener(clean_postgres_url, rec.on_change, ignore_origin="me")
    await listener.start()
    try:
        await enqueue(me, "mine")
        theirs = await enqueue(other, "theirs")
        # PostgreSQL delivers notifications in commit order and the listener hands them
        # on in order: once "theirs" is here, "mine" would be here before it.
        await rec.wait_for(lambda: any(theirs.id in ids for _, _, ids in rec.changes))
        assert rec.changes == [("other", "PENDING", [theirs.id])]
    finally:
        await listener.stop()
        await me.close()
        await other.close()


async def test_nothing_is_sent_for_a_rolled_back_write(
    clean_postgres_url: str, clock: FakeClock
) -> None:
    store = SqlJobStore(clean_postgres_url, instance_id="x", clock=clock)
    rec = Recorder()
    listener = PgChangeListener(clean_postgres_url, rec.on_change)
    await listener.start()
    try:
        await enqueue(store, "dup")
        with pytest.raises(DuplicateJobError, match="active job"):
            await enqueue(store, "dup")
        await enqueue(store, "marker")
        await rec.wait_for(lambda: len(rec.changes) >= 2)
        assert [c[1] for c in rec.changes] == ["PENDING", "PENDING"]
    finally:
        await listener.stop()
        await store.close()


async def test_listener_reconnects_after_its_connection_is_killed(
    clean_postgres_url: str, clock: FakeClock
) -> None:
    store = SqlJobStore(clean_postgres_url, instance_id="x", clock=clock)
    rec = Recorder()
    listener = PgChangeListener(
        clean_postgres_url, rec.on_change, on_reconnect=rec.on_reconnect, min_backoff=0.05
    )
    await listener.start()
    try:
        admin = await asyncpg.connect(asyncpg_dsn(clean_postgres_url))
        try:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE query LIKE 'LISTEN%' AND datname = current_database()"
            )
        finally:
            await admin.close()
        await rec.wait_for(lambda: rec.reconnects > 0)
        job = await enqueue(store, "after-reconnect")
        await rec.wait_for(lambda: any(job.id in c[2] for c in rec.changes))
        assert listener.connections_made == 2
    finally:
        await listener.stop()
        await store.close()


async def test_a_large_batch_is_announced_in_pieces(
    clean_postgres_url: str, clock: FakeClock
) -> None:
    instance_id = "big-" + "i" * 196  # the longest a store takes: the pieces must still fit
    store = SqlJobStore(clean_postgres_url, instance_id=instance_id, clock=clock)
    rec = Recorder()
    listener = PgChangeListener(clean_postgres_url, rec.on_change)
    await listener.start()
    # The payloads as PostgreSQL delivers them, before any parsing.
    raw: list[str] = []
    arrived = asyncio.Event()

    def keep(_conn: object, _pid: int, _channel: str, payload: str) -> None:
        raw.append(payload)
        arrived.set()

    watcher = await asyncpg.connect(asyncpg_dsn(clean_postgres_url))
    await watcher.add_listener(CHANNEL, keep)
    try:
        ids = {(await enqueue(store, f"big-{i}")).id for i in range(400)}
        claims = await store.worker.claim(ClaimParams(limit=400, lease_seconds=60))
        assert {c.job.id for c in claims} == ids

        def processing() -> list[list[str]]:
            return [c[2] for c in rec.changes if c[1] == "PROCESSING"]

        await rec.wait_for(lambda: sum(len(p) for p in processing()) >= 400)
        pieces = processing()
        assert len(pieces) == 3 and max(len(p) for p in pieces) <= IDS_PER_NOTIFICATION
        assert {i for p in pieces for i in p} == ids

        # The statement's SQL writes exactly the format notify.py defines and parses.
        def sent() -> list[str]:
            return [p for p in raw if FIELD_SEPARATOR + "PROCESSING" + FIELD_SEPARATOR in p]

        async with asyncio.timeout(5):
            while len(sent()) < len(pieces):
                arrived.clear()
                await arrived.wait()
        assert sent() == [
            payload_prefix(instance_id) + "PROCESSING" + FIELD_SEPARATOR + ID_SEPARATOR.join(p)
            for p in pieces
        ]
        assert max(len(p.encode()) for p in sent()) < MAX_PAYLOAD_BYTES
    finally:
        await watcher.close()
        await listener.stop()
        await store.close()
