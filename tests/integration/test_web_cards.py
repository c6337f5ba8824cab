"""san-web's knowledge cards written by the change feed's handler
(san_jobs.web._cards.apply_job_change), on SQLite and PostgreSQL: each change is
applied in a transaction of its own, as the SDK's inbox does."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.web._cards import apply_job_change, cards_of, related_cards
from san_jobs.web._store import ScrapStore, knowledge_cards, scrap_jobs
from tests.support.ci import skip_or_fail_in_ci
from tests.support.databases import (
    create_temp_postgres_database_async,
    drop_database_async,
    postgres_unreachable_reason,
)

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ScrapStore]:
    """san-web's database, made as san-web makes it at start."""
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'web.db'}"
    else:
        reason = await postgres_unreachable_reason()
        if reason is not None:
            skip_or_fail_in_ci(reason)
        url = await create_temp_postgres_database_async(migrated=False)
    opened = await ScrapStore.open(url)
    try:
        yield opened
    finally:
        await opened.close()
        if request.param == "postgres":
            await drop_database_async(url)


def card_job(
    scrap_id: str,
    *,
    job_id: str | None = None,
    created: int = 1_800_000_000,
    summary: str = "A summary.",
    tags: tuple[str, ...] = ("jobs", "queues"),
    embedding: tuple[float, ...] = (0.6, 0.8, 0.0),
    status: pb.JobStatus.ValueType = pb.JOB_STATUS_COMPLETED,
    job_type: pb.JobType.ValueType = pb.JOB_TYPE_CARD_ANALYSIS,
    request_id: str = "",
) -> pb.Job:
    """A job as the change feed sends it: its result, no input."""
    job = pb.Job(
        id=job_id or str(uuid.uuid4()),
        job_type=job_type,
        status=status,
        target_id=scrap_id,
        requested_by="san-web",
        request_id=request_id,
    )
    job.create_time.FromSeconds(created)
    job.update_time.FromSeconds(created + 5)
    if status == pb.JOB_STATUS_COMPLETED:
        job.complete_time.FromSeconds(created + 5)
        if job_type == pb.JOB_TYPE_CARD_ANALYSIS:
            job.card_analysis_result.CopyFrom(
                pb.CardAnalysisResult(
                    summary=summary, tags=list(tags), embedding=list(embedding), model="local"
                )
            )
        else:
            job.embedding_result.CopyFrom(pb.EmbeddingResult(vector=[1.0], model="local"))
    return job


async def apply(store: ScrapStore, job: pb.Job) -> None:
    """One delivery, as the inbox makes it: a transaction around the handler."""
    async with store.engine.begin() as conn:
        await apply_job_change(conn, job)


async def scrap_with_job(store: ScrapStore, owner: str | None = None, title: str = "T") -> str:
    """A scrap and the id of the job san-web asked for it (recorded in scrap_jobs)."""
    scrap = await store.add(url="", title=title, text="some text", owner=owner)
    job_id = str(uuid.uuid4())
    await store.set_job(scrap.id, job_id, owner=owner)
    return f"{scrap.id} {job_id}"


async def rows(store: ScrapStore) -> list[sa.Row[tuple[str, str, str]]]:
    async with store.engine.connect() as conn:
        result = await conn.execute(
            sa.select(
                knowledge_cards.c.scrap_id, knowledge_cards.c.job_id, knowledge_cards.c.summary
            )
        )
        return list(result.all())


async def test_a_completed_analysis_makes_the_scraps_card(store: ScrapStore) -> None:
    scrap_id, job_id = (await scrap_with_job(store)).split()
    await apply(store, card_job(scrap_id, job_id=job_id, embedding=(0.25, -1.5, 3.0)))
    async with store.engine.connect() as conn:
        cards = await cards_of(conn, [scrap_id])
        stored = (await conn.execute(sa.select(knowledge_cards.c.embedding))).scalar_one()
    card = cards[scrap_id]
    assert (card.job_id, card.summary, card.tags, card.model) == (
        job_id,
        "A summary.",
        ["jobs", "queues"],
        "local",
    )
    assert card.created_at.timestamp() == 1_800_000_005  # the job's complete_time
    # float32 bytes, 4 a number
    assert len(stored) == 12
    import numpy as np

    assert np.frombuffer(stored, dtype="<f4").tolist() == [0.25, -1.5, 3.0]


async def test_a_redelivered_change_is_applied_once(store: ScrapStore) -> None:
    scrap_id, job_id = (await scrap_with_job(store)).split()
    job = card_job(scrap_id, job_id=job_id)
    await apply(store, job)
    before = await rows(store)
    async with store.engine.connect() as conn:
        first = (await cards_of(conn, [scrap_id]))[scrap_id]
    await apply(store, job)
    await apply(store, job)
    assert await rows(store) == before and len(before) == 1
    async with store.engine.connect() as conn:
        assert (await cards_of(conn, [scrap_id]))[scrap_id] == first


async def test_a_change_rolled_back_leaves_no_card_and_applies_on_redelivery(
    store: ScrapStore,
) -> None:
    scrap_id, job_id = (await scrap_with_job(store)).split()
    job = card_job(scrap_id, job_id=job_id)
    with pytest.raises(RuntimeError):
        async with store.engine.begin() as conn:
            await apply_job_change(conn, job)
            raise RuntimeError("crash before the inbox stored its cursor")
    assert await rows(store) == []
    await apply(store, job)
    assert [(r.scrap_id, r.job_id) for r in await rows(store)] == [(scrap_id, job_id)]


async def test_a_completion_for_a_deleted_scrap_is_dropped_and_logged(
    store: ScrapStore, caplog: pytest.LogCaptureFixture
) -> None:
    scrap_id, job_id = (await scrap_with_job(store)).split()
    assert await store.delete(scrap_id)
    with caplog.at_level(logging.INFO, logger="san_web.cards"):
        await apply(store, card_job(scrap_id, job_id=job_id))
    assert await rows(store) == []
    assert any(
        "target deleted" in record.getMessage() and job_id in record.getMessage()
        for record in caplog.records
    )


async def test_deleting_a_scrap_deletes_its_card(store: ScrapStore) -> None:
    kept_id, kept_job = (await scrap_with_job(store)).split()
    gone_id, gone_job = (await scrap_with_job(store)).split()
    await apply(store, card_job(kept_id, job_id=kept_job))
    await apply(store, card_job(gone_id, job_id=gone_job))
    assert await store.delete(gone_id)
    assert [r.scrap_id for r in await rows(store)] == [kept_id]


async def test_deleting_a_user_deletes_their_cards(store: ScrapStore) -> None:
    mine_id, mine_job = (await scrap_with_job(store, owner="ann")).split()
    theirs_id, theirs_job = (await scrap_with_job(store, owner="bob")).split()
    await store.add_user("ann", "x")
    await apply(store, card_job(mine_id, job_id=mine_job))
    await apply(store, card_job(theirs_id, job_id=theirs_job))
    assert await store.delete_user("ann") is not None
    assert [r.scrap_id for r in await rows(store)] == [theirs_id]


async def test_an_older_jobs_completion_after_a_newer_card_is_not_applied(
    store: ScrapStore,
) -> None:
    scrap_id, older_id = (await scrap_with_job(store)).split()
    newer_id = str(uuid.uuid4())
    await store.set_job(scrap_id, newer_id)
    newer = card_job(scrap_id, job_id=newer_id, created=1_800_000_100, summary="Newer.")
    older = card_job(scrap_id, job_id=older_id, created=1_800_000_000, summary="Older.")
    await apply(store, newer)
    await apply(store, older)  # a retried older job that completed last
    assert [(r.job_id, r.summary) for r in await rows(store)] == [(newer_id, "Newer.")]
    # In order, the newer one replaces the older one.
    other_id, first_id = (await scrap_with_job(store)).split()
    second_id = str(uuid.uuid4())
    await store.set_job(other_id, second_id)
    await apply(store, card_job(other_id, job_id=first_id, created=1_800_000_000, summary="1"))
    await apply(store, card_job(other_id, job_id=second_id, created=1_800_000_050, summary="2"))
    async with store.engine.connect() as conn:
        assert (await cards_of(conn, [other_id]))[other_id].summary == "2"


async def test_changes_that_are_not_a_completed_card_analysis_are_ignored(
    store: ScrapStore,
) -> None:
    scrap_id, job_id = (await scrap_with_job(store)).split()
    for status in (pb.JOB_STATUS_FAILED, pb.JOB_STATUS_CANCELLED, pb.JOB_STATUS_PENDING):
        await apply(store, card_job(scrap_id, job_id=job_id, status=status))
    await apply(store, card_job(scrap_id, job_id=job_id, job_type=pb.JOB_TYPE_EMBEDDING))
    assert await rows(store) == []


async def test_a_job_san_web_did_not_ask_for_makes_no_card(store: ScrapStore) -> None:
    scrap = await store.add(url="", title="T", text="some text")
    # Same target, but no scrap_jobs row and not the scrap's outbox request.
    await apply(store, card_job(scrap.id, request_id=str(uuid.uuid4())))
    await apply(store, card_job(scrap.id))
    assert await rows(store) == []


async def test_the_outboxs_job_is_recognised_before_san_web_recorded_it(
    store: ScrapStore,
) -> None:
    outbox_id = str(uuid.uuid4())

    async def hand_off(_conn: object, _scrap: object) -> str:
        return outbox_id

    scrap = await store.add(url="", title="T", text="some text", hand_off=hand_off)  # type: ignore[arg-type]
    job = card_job(scrap.id, request_id=outbox_id)
    await apply(store, job)
    await apply(store, job)  # redelivered: recorded once, one card
    assert [(r.scrap_id, r.job_id) for r in await rows(store)] == [(scrap.id, job.id)]
    async with store.engine.connect() as conn:
        recorded = (await conn.execute(sa.select(scrap_jobs.c.job_id))).scalars().all()
    assert recorded == [job.id]
    found = await store.get(scrap.id)
    assert found is not None and found.job_id == job.id


async def test_a_direct_analysis_is_recognised_before_san_web_recorded_its_job(
    store: ScrapStore,
) -> None:
    """POST /analyze records its request id before the Enqueue: a completion that
    comes back through the feed before set_job commits still makes the card."""
    scrap = await store.add(url="", title="T", text="some text", owner="ann")
    request_id = await store.add_analysis_request(scrap.id, "ann")
    job = card_job(scrap.id, request_id=request_id)
    await apply(store, job)
    assert [(r.scrap_id, r.job_id) for r in await rows(store)] == [(scrap.id, job.id)]
    # Another scrap's request id does not make this scrap's card.
    other = await store.add(url="", title="U", text="other text", owner="ann")
    await apply(store, card_job(other.id, request_id=request_id))
    assert [r.scrap_id for r in await rows(store)] == [scrap.id]


async def test_related_cards_rank_by_cosine_within_the_owner(store: ScrapStore) -> None:
    vectors = {
        "near": (1.0, 0.1, 0.0),
        "middle": (0.5, 0.5, 0.5),
        "far": (-1.0, 0.0, 0.2),
    }
    ids: dict[str, str] = {}
    for title, vector in {"me": (1.0, 0.0, 0.0), **vectors}.items():
        scrap_id, job_id = (await scrap_with_job(store, owner="ann", title=title)).split()
        ids[title] = scrap_id
        await apply(store, card_job(scrap_id, job_id=job_id, embedding=vector))
    other_id, other_job = (await scrap_with_job(store, owner="bob", title="bob's")).split()
    await apply(store, card_job(other_id, job_id=other_job, embedding=(1.0, 0.0, 0.0)))
    async with store.engine.connect() as conn:
        found = await related_cards(conn, ids["me"], owner="ann")
        everyone = await related_cards(conn, ids["me"], owner=None)
    assert [card.title for card in found] == ["near", "middle", "far"]
    assert found[0].score == pytest.approx(1.0 / (1.01**0.5), abs=1e-5)
    assert found[-1].score < 0
    assert everyone[0].title == "bob's"  # --auth off: one space
