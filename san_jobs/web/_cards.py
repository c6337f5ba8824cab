"""san-web's knowledge cards: the one writer of ``knowledge_cards`` and its readers.

A card is what a scrap's CARD_ANALYSIS job made (summary, tags, embedding, model),
copied into san-web's own database so that it outlives the job: JobService prunes
finished jobs (``--retain-completed``), san-web keeps its cards until their scraps go.

:func:`apply_job_change` is the handler of JobService's change feed, called by the
SDK's transactional inbox (``san_jobs.client.inbox``) inside the transaction that
also stores the feed's cursor: the card and the record of having applied the change
commit together. A change may be delivered again after a crash, so applying one twice
leaves what applying it once did.

Related cards (:func:`related_cards`) are found by brute force: every card of the
owner with an embedding of the same model and size is read and compared (cosine) with
numpy. Reading is what costs: each card's vector is 1 KiB with the local backend (256
float32), so ten thousand cards are ~10 MiB read per request and a few milliseconds of
numpy; it stops being fine somewhere in the tens of thousands of cards per owner
(hundreds of milliseconds a request, mostly the database read), where an index
(sqlite-vec, pgvector) should take over.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.web._store import analysis_requests, knowledge_cards, scrap_jobs, scraps

log = logging.getLogger("san_web.cards")

RELATED_LIMIT = 5
_VECTOR = np.dtype("<f4")  # float32, little-endian: the stored bytes are the same anywhere


@dataclass(frozen=True, slots=True)
class Card:
    """A scrap's knowledge card (without its embedding)."""

    scrap_id: str
    job_id: str
    summary: str
    tags: list[str]
    model: str
    created_at: datetime

    def view(self) -> dict[str, Any]:
        """The card's JSON shape in the web API."""
        return {
            "summary": self.summary,
            "tags": self.tags,
            "model": self.model,
            "jobId": self.job_id,
            "createdAt": self.created_at.isoformat(),
        }


@dataclass(frozen=True, slots=True)
class RelatedCard:
    scrap_id: str
    title: str
    score: float

    def view(self) -> dict[str, Any]:
        return {"scrapId": self.scrap_id, "title": self.title, "score": self.score}


async def apply_job_change(conn: AsyncConnection, job: pb.Job) -> None:
    """Apply one change of JobService's change feed (``job`` as it was after it) in the
    caller's transaction on san-web's database.

    Only a COMPLETED CARD_ANALYSIS job that san-web asked for makes a card; every other
    change is ignored. San-web asked for a job when ``scrap_jobs`` records it, or when
    the job's ``request_id`` is its scrap's outbox row or one of its
    ``analysis_requests`` (sent, and the change came before san-web wrote
    ``scrap_jobs``: the row is written here then).
    The feed's job carries its result, not its input.

    The latest analysis wins, by the job's ``create_time``: the job the user asked for
    last is the one they want to see, whatever order the jobs finish or their changes
    arrive in (an older job retried by RetryFailed can complete after a newer one).
    ``scrap_jobs`` has no order of its own to compare by. Equal times (never seen from
    one JobService) fall back to the job id, so two instances still agree.

    Idempotent: the same change again writes the same row (its ``created_at`` is the
    job's ``complete_time``, not the time it was applied)."""
    if job.job_type != pb.JOB_TYPE_CARD_ANALYSIS or job.status != pb.JOB_STATUS_COMPLETED:
        return
    if job.WhichOneof("result") != "card_analysis_result":
        log.warning("job_id=%s completed without a card analysis result: ignored", job.id)
        return
    scrap_id = await _scrap_of(conn, job)
    if scrap_id is None:
        return
    result = job.card_analysis_result
    created_ns = job.create_time.ToNanoseconds()
    ended = job.complete_time if job.HasField("complete_time") else job.update_time
    values = {
        "scrap_id": scrap_id,
        "job_id": job.id,
        "job_created_ns": created_ns,
        "summary": result.summary,
        "tags": list(result.tags),
        "embedding": np.asarray(result.embedding, dtype=_VECTOR).tobytes(),
        "model": result.model,
        "created_at": ended.ToDatetime(tzinfo=UTC),
    }
    insert = (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(
        knowledge_cards
    ).values(**values)
    table = knowledge_cards.c
    newer = sa.or_(
        insert.excluded.job_created_ns > table.job_created_ns,
        sa.and_(
            insert.excluded.job_created_ns == table.job_created_ns,
            insert.excluded.job_id >= table.job_id,
        ),
    )
    written = await conn.execute(
        insert.on_conflict_do_update(
            index_elements=[table.scrap_id],
            set_={name: insert.excluded[name] for name in values if name != "scrap_id"},
            where=newer,
        )
    )
    if not written.rowcount:
        log.info("job_id=%s scrap_id=%s: a newer analysis made its card; kept", job.id, scrap_id)


async def _scrap_of(conn: AsyncConnection, job: pb.Job) -> str | None:
    """The id of the scrap san-web asked ``job`` for, its row locked until the caller
    commits (a scrap deleted meanwhile waits for the card, then takes it with it);
    None if the job is not san-web's or its scrap is gone."""
    recorded = (
        await conn.execute(
            sa.select(scrap_jobs.c.scrap_id, scrap_jobs.c.owner).where(
                scrap_jobs.c.job_id == job.id
            )
        )
    ).first()
    scrap_id = recorded.scrap_id if recorded is not None else job.target_id
    # FOR UPDATE on PostgreSQL; SQLite has one writer at a time and ignores it.
    scrap = (
        await conn.execute(
            sa.select(scraps.c.id, scraps.c.owner, scraps.c.outbox_id, scraps.c.job_id)
            .where(scraps.c.id == scrap_id)
            .with_for_update()
        )
    ).first()
    if scrap is None:
        # Deleting a scrap deletes its scrap_jobs rows too: a job san-web made for a
        # scrap that is gone looks like any job whose target is not a scrap.
        log.info("job_id=%s target_id=%s: target deleted; its card is dropped", job.id, scrap_id)
        return None
    if recorded is not None:
        return str(scrap.id)
    if job.request_id and (
        job.request_id == scrap.outbox_id or await _asked_directly(conn, job.request_id, scrap.id)
    ):
        # The outbox (or a direct analysis) sent this job and the change came before
        # san-web recorded the job: record it now.
        await conn.execute(
            scrap_jobs.insert().values(job_id=job.id, scrap_id=scrap.id, owner=scrap.owner)
        )
        if scrap.job_id is None:
            await conn.execute(scraps.update().where(scraps.c.id == scrap.id).values(job_id=job.id))
        return str(scrap.id)
    log.info("job_id=%s target_id=%s: not a job san-web asked for; ignored", job.id, scrap_id)
    return None


async def _asked_directly(conn: AsyncConnection, request_id: str, scrap_id: str) -> bool:
    """Whether ``request_id`` is a direct analysis of ``scrap_id`` san-web sent."""
    row = (
        await conn.execute(
            sa.select(analysis_requests.c.request_id).where(
                analysis_requests.c.request_id == request_id,
                analysis_requests.c.scrap_id == scrap_id,
            )
        )
    ).first()
    return row is not None


def _card(row: Any) -> Card:
    created = row.created_at
    return Card(
        scrap_id=row.scrap_id,
        job_id=row.job_id,
        summary=row.summary,
        tags=[str(tag) for tag in row.tags],
        model=row.model,
        created_at=created if created.tzinfo is not None else created.replace(tzinfo=UTC),
    )


_CARD_COLUMNS = (
    knowledge_cards.c.scrap_id,
    knowledge_cards.c.job_id,
    knowledge_cards.c.summary,
    knowledge_cards.c.tags,
    knowledge_cards.c.model,
    knowledge_cards.c.created_at,
)


async def cards_of(conn: AsyncConnection, scrap_ids: list[str]) -> dict[str, Card]:
    """The cards of these scraps, by scrap id (a scrap without one is missing)."""
    if not scrap_ids:
        return {}
    rows = await conn.execute(
        sa.select(*_CARD_COLUMNS).where(knowledge_cards.c.scrap_id.in_(scrap_ids))
    )
    return {row.scrap_id: _card(row) for row in rows}


async def related_cards(
    conn: AsyncConnection, scrap_id: str, *, owner: str | None, limit: int = RELATED_LIMIT
) -> list[RelatedCard]:
    """The ``limit`` cards most like ``scrap_id``'s by cosine similarity of their
    embeddings, best first: other scraps of ``owner`` (None: every scrap, as san-web
    without logins shows them), with a vector of the same model and size."""
    mine = (
        await conn.execute(
            sa.select(knowledge_cards.c.embedding, knowledge_cards.c.model).where(
                knowledge_cards.c.scrap_id == scrap_id
            )
        )
    ).first()
    if mine is None or not mine.embedding:
        return []
    query = (
        sa.select(knowledge_cards.c.scrap_id, knowledge_cards.c.embedding, scraps.c.title)
        .join(scraps, scraps.c.id == knowledge_cards.c.scrap_id)
        .where(
            knowledge_cards.c.scrap_id != scrap_id,
            knowledge_cards.c.model == mine.model,
            sa.func.length(knowledge_cards.c.embedding) == len(mine.embedding),
        )
    )
    if owner is not None:
        query = query.where(scraps.c.owner == owner)
    rows = (await conn.execute(query)).all()
    if not rows:
        return []
    target = _unit(np.frombuffer(mine.embedding, dtype=_VECTOR))
    matrix = np.frombuffer(b"".join(row.embedding for row in rows), dtype=_VECTOR)
    matrix = matrix.reshape(len(rows), target.size).astype(np.float64)
    norms = np.linalg.norm(matrix, axis=1)
    norms[norms == 0] = 1.0  # a zero vector scores 0 with everything
    scores = (matrix @ target) / norms
    order = np.argsort(-scores, kind="stable")[:limit]
    return [RelatedCard(rows[i].scrap_id, rows[i].title, round(float(scores[i]), 6)) for i in order]


def _unit(vector: np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.float64]]:
    as64 = vector.astype(np.float64)
    norm = float(np.linalg.norm(as64))
    return as64 / norm if norm else as64
