"""The SDK outbox against a real JobService (issue 11, points 1 and 2), on SQLite and
PostgreSQL: same-transaction writes, wake-up on commit, exactly-once delivery across
outages and lost answers, refusals, per-target order, pruning."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from san_jobs.client.outbox import Outbox, OutboxEntry
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from tests.integration.job_service.scripted_gateway import Hang
from tests.integration.outbox.outbox_support import Stack, wait_for

METADATA = sa.MetaData()
SCRAPS = sa.Table("scraps", METADATA, sa.Column("id", sa.String(64), primary_key=True))


def card_request(target_id: str, *, return_existing: bool = False) -> pb.EnqueueRequest:
    return pb.EnqueueRequest(
        job_type=pb.JOB_TYPE_CARD_ANALYSIS,
        target_id=target_id,
        card_analysis_input=pb.CardAnalysisInput(text=f"Some page text about {target_id}."),
        requested_by="outbox-test",
        on_duplicate=(
            pb.ON_DUPLICATE_RETURN_EXISTING if return_existing else pb.ON_DUPLICATE_REJECT
        ),
    )


@asynccontextmanager
async def running(stack: Stack, **options: Any) -> AsyncIterator[Outbox]:
    async with stack.app_engine.begin() as conn:
        await conn.run_sync(METADATA.create_all)
    outbox = Outbox(stack.app_engine, stack.client, **{"max_backoff": 0.5, **options})
    await outbox.start()
    try:
        yield outbox
    finally:
        await outbox.stop()


def state_is(outbox: Outbox, row_id: str, state: str) -> Callable[[], Any]:
    async def check() -> bool:
        entry = await outbox.entry(row_id)
        return entry is not None and entry.state == state

    return check


async def scraps(stack: Stack) -> list[str]:
    async with stack.app_engine.connect() as conn:
        return list((await conn.execute(sa.select(SCRAPS.c.id))).scalars())


@pytest.mark.parametrize("through", ["connection", "session"])
async def test_a_commit_wakes_the_relay_at_once(stack: Stack, through: str) -> None:
    # The fallback poll is a minute away: only the commit hook can deliver in time.
    async with running(stack, poll_interval=60.0) as outbox:
        await asyncio.sleep(0.2)  # let the relay's first pass end: it now sleeps 60 s
        started = time.monotonic()
        if through == "connection":
            async with stack.app_engine.begin() as conn:
                await conn.execute(SCRAPS.insert().values(id="scrap-1"))
                row_id = await outbox.add(conn, card_request("scrap-1"))
        else:
            async with AsyncSession(stack.app_engine) as session, session.begin():
                await session.execute(SCRAPS.insert().values(id="scrap-1"))
                row_id = await outbox.add(session, card_request("scrap-1"))
        await wait_for(state_is(outbox, row_id, "delivered"), within=10.0)
        took = time.monotonic() - started
        entry = await outbox.entry(row_id)
    assert entry is not None and entry.job_id
    (job,) = await stack.jobs_for("scrap-1")
    assert job.id == entry.job_id
    assert stack.proxy.calls == {row_id: 1}
    assert took < 60.0  # delivered by the wake-up, long before any poll
    print(f"commit to delivered: {took * 1000:.1f} ms")


async def test_business_row_and_job_request_roll_back_together(stack: Stack) -> None:
    async with running(stack, poll_interval=0.05) as outbox:
        with pytest.raises(RuntimeError, match="the request failed"):
            async with stack.app_engine.begin() as conn:
                await conn.execute(SCRAPS.insert().values(id="scrap-gone"))
                gone = await outbox.add(conn, card_request("scrap-gone"))
                raise RuntimeError("the request failed after both writes")
        async with stack.app_engine.begin() as conn:
            await conn.execute(SCRAPS.insert().values(id="scrap-kept"))
            kept = await outbox.add(conn, card_request("scrap-kept"))
        await wait_for(state_is(outbox, kept, "delivered"))
        assert await outbox.entry(gone) is None
    assert await scraps(stack) == ["scrap-kept"]
    assert stack.proxy.calls == {kept: 1}
    assert await stack.jobs_for("scrap-gone") == []


async def test_jobservice_down_then_up_delivers_each_row_exactly_once(stack: Stack) -> None:
    await stack.proxy_down()
    targets = [f"scrap-{n}" for n in range(20)]
    async with running(stack, poll_interval=0.05, max_backoff=0.3) as outbox:
        ids = []
        for target in targets:
            async with stack.app_engine.begin() as conn:
                await conn.execute(SCRAPS.insert().values(id=target))
                ids.append(await outbox.add(conn, card_request(target)))

        async def tried_while_down() -> bool:
            return any(e.error for e in (await outbox.entries(ids)).values())

        await wait_for(tried_while_down)
        entries = await outbox.entries(ids)
        assert all(e.state == "queued" and e.job_id is None for e in entries.values())
        assert any("UNAVAILABLE" in (e.error or "") for e in entries.values())

        await stack.proxy_up()
        back = time.monotonic()

        async def all_delivered() -> bool:
            found = await outbox.entries(ids)
            return all(e.state == "delivered" for e in found.values())

        await wait_for(all_delivered)
        took = time.monotonic() - back
        entries = await outbox.entries(ids)
    assert stack.proxy.calls == {row_id: 1 for row_id in ids}
    jobs = await stack.all_jobs()
    assert sorted(job.target_id for job in jobs) == sorted(targets)
    assert {job.id for job in jobs} == {e.job_id for e in entries.values()}
    print(f"JobService back to last row delivered: {took:.2f} s")


async def test_a_lost_answer_is_redelivered_and_returns_the_same_job(stack: Stack) -> None:
    stack.proxy.lose_answers = 1  # JobService commits, the relay hears DEADLINE_EXCEEDED
    async with running(stack, poll_interval=0.05) as outbox:
        async with stack.app_engine.begin() as conn:
            row_id = await outbox.add(conn, card_request("scrap-late"))
        await wait_for(state_is(outbox, row_id, "delivered"))
        first = await outbox.entry(row_id)
        assert first is not None and first.attempts == 2
        assert stack.proxy.calls[row_id] == 2
        (job,) = await stack.jobs_for("scrap-late")
        assert job.id == first.job_id

        # The job finishes; then the relay's record of the answer is lost too (a crash
        # between the call and the write): the row is sent a third time.
        async def completed() -> bool:
            jobs = await stack.jobs_for("scrap-late")
            return jobs[0].status == pb.JOB_STATUS_COMPLETED

        await wait_for(completed)
        async with stack.app_engine.begin() as conn:
            await conn.execute(
                sa.text(
                    "UPDATE san_jobs_outbox SET state = 'queued', job_id = NULL,"
                    " settled_at = NULL WHERE id = :id"
                ),
                {"id": row_id},
            )
        outbox.wake()
        await wait_for(state_is(outbox, row_id, "delivered"))
        again = await outbox.entry(row_id)
    assert stack.proxy.calls[row_id] == 3
    assert again is not None and again.job_id == job.id  # the finished job, not a new one
    assert [j.id for j in await stack.jobs_for("scrap-late")] == [job.id]


async def test_a_permanent_refusal_is_recorded_and_not_retried(stack: Stack) -> None:
    delivered: list[OutboxEntry] = []
    async with running(stack, poll_interval=0.05, on_delivered=delivered.append) as outbox:
        async with stack.app_engine.begin() as conn:
            bad = await outbox.add(conn, card_request(""))  # target_id is required
        await wait_for(state_is(outbox, bad, "refused"))
        # A later good row is delivered: the relay went on, and never resent the bad one.
        async with stack.app_engine.begin() as conn:
            good = await outbox.add(conn, card_request("scrap-ok"))
        await wait_for(state_is(outbox, good, "delivered"))
        refused = await outbox.entry(bad)
    assert refused is not None
    assert refused.error is not None and refused.error.startswith("INVALID_ARGUMENT")
    assert (refused.attempts, refused.job_id, refused.delivered_at) == (1, None, None)
    assert stack.proxy.calls == {bad: 1, good: 1}
    assert [entry.id for entry in delivered] == [good]


async def test_a_duplicate_is_refused_unless_the_request_returns_the_existing_job(
    stack: Stack,
) -> None:
    stack.gateway.script = lambda _job, _attempt: Hang()  # the first job stays active
    active = await stack.jobs.Enqueue(card_request("scrap-busy"), timeout=10)
    async with running(stack, poll_interval=0.05) as outbox:
        async with stack.app_engine.begin() as conn:
            rejected = await outbox.add(conn, card_request("scrap-busy"))
        await wait_for(state_is(outbox, rejected, "refused"))
        async with stack.app_engine.begin() as conn:
            joined = await outbox.add(conn, card_request("scrap-busy", return_existing=True))
        await wait_for(state_is(outbox, joined, "delivered"))
        entries = await outbox.entries([rejected, joined])
    refusal = entries[rejected].error or ""
    assert refusal.startswith("ALREADY_EXISTS") and active.job.id in refusal
    assert entries[joined].job_id == active.job.id
    assert stack.proxy.calls == {rejected: 1, joined: 1}


async def test_rows_of_one_target_are_delivered_in_the_order_they_were_added(
    stack: Stack,
) -> None:
    targets = [f"scrap-{n}" for n in range(4)]
    async with running(stack, poll_interval=0.05) as outbox:
        added: dict[str, list[str]] = {target: [] for target in targets}
        async with stack.app_engine.begin() as conn:
            for _round in range(5):
                for target in targets:
                    request = card_request(target, return_existing=True)
                    added[target].append(await outbox.add(conn, request))
        every = [row_id for ids in added.values() for row_id in ids]

        async def all_delivered() -> bool:
            found = await outbox.entries(every)
            return all(e.state == "delivered" for e in found.values())

        await wait_for(all_delivered)
    for target in targets:
        arrived = [rid for tid, rid in stack.proxy.arrivals if tid == target]
        assert arrived == added[target]
    assert stack.proxy.calls == {row_id: 1 for row_id in every}


@pytest.mark.postgres
@pytest.mark.parametrize("stack", ["postgres"], indirect=True)  # SQLite: one relay per file
async def test_two_relays_on_one_postgres_database_deliver_each_row_once(
    stack: Stack,
) -> None:
    other_engine = create_async_engine(stack.app_url)
    targets = [f"scrap-{n}" for n in range(20)]
    async with running(stack, poll_interval=0.05, batch_size=8) as first:
        second = Outbox(other_engine, stack.client, poll_interval=0.05, batch_size=8)
        await second.start()
        try:
            added: dict[str, list[str]] = {target: [] for target in targets}
            for _round in range(10):
                async with stack.app_engine.begin() as conn:
                    for target in targets:
                        request = card_request(target, return_existing=True)
                        added[target].append(await first.add(conn, request))
            every = [row_id for ids in added.values() for row_id in ids]

            async def all_delivered() -> bool:
                found = await first.entries(every)
                return all(e.state == "delivered" for e in found.values())

            await wait_for(all_delivered, within=60.0)
        finally:
            await second.stop()
            await other_engine.dispose()
    assert stack.proxy.calls == {row_id: 1 for row_id in every}
    for target in targets:
        arrived = [rid for tid, rid in stack.proxy.arrivals if tid == target]
        assert arrived == added[target]


async def test_settled_rows_are_pruned_after_the_retention(stack: Stack) -> None:
    async with running(stack, poll_interval=0.05, retention=3600) as outbox:
        async with stack.app_engine.begin() as conn:
            old_delivered = await outbox.add(conn, card_request("scrap-a"))
            old_refused = await outbox.add(conn, card_request(""))
            recent = await outbox.add(conn, card_request("scrap-b"))
        for row_id, state in [
            (old_delivered, "delivered"),
            (old_refused, "refused"),
            (recent, "delivered"),
        ]:
            await wait_for(state_is(outbox, row_id, state))
        two_hours_ago = datetime.now(UTC).replace(tzinfo=None) - timedelta(hours=2)
        async with stack.app_engine.begin() as conn:
            await conn.execute(
                sa.text("UPDATE san_jobs_outbox SET settled_at = :at WHERE id IN (:a, :b)"),
                {"at": two_hours_ago, "a": old_delivered, "b": old_refused},
            )
        assert await outbox.prune() == 2
        assert set(await outbox.entries([old_delivered, old_refused, recent])) == {recent}


async def test_the_relay_prunes_by_itself(stack: Stack) -> None:
    async with running(stack, poll_interval=0.05, retention=0.2) as outbox:
        async with stack.app_engine.begin() as conn:
            row_id = await outbox.add(conn, card_request("scrap-short-lived"))
        seen: list[str | None] = []

        async def pruned() -> bool:
            # Delivered rows live 0.2 s: a busy machine may never show this poll the
            # "delivered" state before the row is gone, so every state seen is kept.
            entry = await outbox.entry(row_id)
            seen.append(None if entry is None else entry.state)
            return entry is None

        await wait_for(pruned)
    assert "refused" not in seen, seen
    assert len(await stack.jobs_for("scrap-short-lived")) == 1
