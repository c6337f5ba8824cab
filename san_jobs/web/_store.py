"""san-web's own tables: scraps and who owns them, the jobs made for them, the knowledge
cards those jobs made (san_jobs.web._cards writes them), users and their sessions (not
JobService's database: the soft reference between them is the scrap id, used as the
job's target_id)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
import sqlalchemy.exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from san_jobs.client.inbox import create_inbox_tables
from san_jobs.client.outbox import create_outbox_table
from san_jobs.shared.sqlite_engine import SQLITE_BUSY_TIMEOUT_MS, configure_sqlite
from san_jobs.shared.sqlite_files import prepare_sqlite_url

metadata = sa.MetaData()

scraps = sa.Table(
    "scraps",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("url", sa.Text, nullable=False, default=""),
    sa.Column("title", sa.Text, nullable=False, default=""),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("job_id", sa.String(36), nullable=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    # The user who saved it; NULL when san-web ran with --auth off (one shared space).
    sa.Column("owner", sa.String(64), nullable=True, index=True),
    # The san_jobs_outbox row that asks JobService for its first analysis (written in
    # the same transaction as the scrap); NULL for scraps saved before the outbox.
    sa.Column("outbox_id", sa.String(36), nullable=True, index=True),
)

# Every job san-web asked for, with whose it is: a job id is checked here before
# JobService is asked about it, and a re-analysed scrap keeps its older jobs visible.
scrap_jobs = sa.Table(
    "scrap_jobs",
    metadata,
    sa.Column("job_id", sa.String(36), primary_key=True),
    sa.Column("scrap_id", sa.String(36), nullable=False, index=True),
    sa.Column("owner", sa.String(64), nullable=True),
)

# A scrap's knowledge card: what its latest analysis made, kept here so that it outlives
# the job (JobService prunes finished jobs). One per scrap; san_jobs.web._cards is its
# only writer (the change feed's handler), and it keeps the card of the most recently
# created job (job_created_ns: the job's create_time in nanoseconds since the epoch, an
# integer so that both dialects order it exactly). The embedding is float32
# little-endian bytes (4 bytes a number: 1 KiB for the local backend's 256), empty when
# the job gave none. The foreign key makes PostgreSQL refuse a card for a scrap that is
# gone; ScrapStore deletes a scrap's card in the scrap's own transaction (SQLite does
# not enforce foreign keys unless asked).
knowledge_cards = sa.Table(
    "knowledge_cards",
    metadata,
    sa.Column(
        "scrap_id",
        sa.String(36),
        sa.ForeignKey("scraps.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("job_id", sa.String(36), nullable=False),
    sa.Column("job_created_ns", sa.BigInteger, nullable=False),
    sa.Column("summary", sa.Text, nullable=False),
    sa.Column("tags", sa.JSON, nullable=False),
    sa.Column("embedding", sa.LargeBinary, nullable=False),
    sa.Column("model", sa.Text, nullable=False),
    # When the job completed (its complete_time): a redelivered change writes the same.
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

# A direct analysis (POST /api/scraps/{id}/analyze) before its Enqueue: the request id
# it is sent with, written first, so that a change of its job that comes back before
# scrap_jobs records it is still known as san-web's (_cards.py). Deleted with its scrap.
analysis_requests = sa.Table(
    "analysis_requests",
    metadata,
    sa.Column("request_id", sa.String(64), primary_key=True),
    sa.Column(
        "scrap_id",
        sa.String(36),
        sa.ForeignKey("scraps.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    sa.Column("owner", sa.String(64), nullable=True),
)

# A user's day (san_jobs.web._days): the "today I learned" note of the scraps saved
# between the previous end of day (--til-at, in the owner's time zone) and this one, and
# the recall questions made from it. owner_key is the owner's name ("_" for the shared
# space of --auth off, a name no user can have). `generation` counts the day's makings
# (1 by the day planner, one more per POST .../generate): the jobs' request ids are
# til:<owner_key>:<day> (and recall:...), with ":<generation>" from the second on, so
# every san-web instance asks JobService for the same jobs. `plan` is what the jobs are
# sent with, stored before they are (whichever instance stores it first, all send it).
# The note and the state columns are written by the change feed's handler only.
daily_notes = sa.Table(
    "daily_notes",
    metadata,
    sa.Column("owner_key", sa.String(64), primary_key=True),
    sa.Column("day", sa.String(10), primary_key=True),
    sa.Column("generation", sa.Integer, nullable=False, default=1),
    sa.Column("plan", sa.JSON(none_as_null=True), nullable=True),
    sa.Column("til_job_id", sa.String(36), nullable=True, index=True),
    sa.Column("recall_job_id", sa.String(36), nullable=True, index=True),
    # The last state the change feed brought for this generation's jobs (NULL: active).
    sa.Column("til_status", sa.String(16), nullable=True),
    sa.Column("til_error", sa.Text, nullable=True),
    sa.Column("recall_status", sa.String(16), nullable=True),
    sa.Column("recall_error", sa.Text, nullable=True),
    sa.Column("title", sa.Text, nullable=True),
    sa.Column("body", sa.Text, nullable=True),
    sa.Column("model", sa.Text, nullable=True),
    sa.Column("noted_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("planned_at", sa.DateTime(timezone=True), nullable=False),
)

# The questions of a day's latest completed recall job, in its order. scrap_id: the
# scrap the question's source came from (NULL: the day's note itself, or a scrap since
# deleted).
recall_questions = sa.Table(
    "recall_questions",
    metadata,
    sa.Column("owner_key", sa.String(64), primary_key=True),
    sa.Column("day", sa.String(10), primary_key=True),
    sa.Column("position", sa.Integer, primary_key=True),
    sa.Column("job_id", sa.String(36), nullable=False),
    sa.Column("question", sa.Text, nullable=False),
    sa.Column("answer", sa.Text, nullable=False),
    sa.Column("source_title", sa.Text, nullable=False, default=""),
    sa.Column("scrap_id", sa.String(36), nullable=True),
)

# What a user may do: "user" (their own scraps: every user made before roles existed),
# "viewer" (also /ops, read only), "operator" (also /ops' actions).
WEB_ROLES = ("user", "viewer", "operator")
DEFAULT_ROLE = "user"

users = sa.Table(
    "users",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("password_hash", sa.Text, nullable=False),  # argon2id, PHC string
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("role", sa.String(16), nullable=False, server_default=DEFAULT_ROLE),
    # IANA name of the user's time zone (their days end at --til-at there); NULL: the
    # --time-zone san-web runs with (UTC unless told).
    sa.Column("time_zone", sa.String(64), nullable=True),
    # HH:MM (or HH:MM:SS) at which the user's days end, in their zone; NULL: --til-at.
    sa.Column("til_at", sa.String(8), nullable=True),
)

# A session is found by the SHA-256 of its cookie value: the table never holds a value
# that would let its reader act as a user.
web_sessions = sa.Table(
    "web_sessions",
    metadata,
    sa.Column("token_hash", sa.String(64), primary_key=True),
    sa.Column("username", sa.String(64), nullable=False, index=True),
    sa.Column("csrf_token", sa.String(64), nullable=False),
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
)


@dataclass(frozen=True, slots=True)
class Scrap:
    id: str
    url: str
    title: str
    text: str
    job_id: str | None
    created_at: datetime
    owner: str | None = None
    outbox_id: str | None = None


@dataclass(frozen=True, slots=True)
class ScrapCursor:
    """Where a page of scraps ended: the last scrap's creation time and id."""

    created_at: datetime
    id: str


def _scrap(row: sa.Row[Any]) -> Scrap:
    return Scrap(
        row.id,
        row.url,
        row.title,
        row.text,
        row.job_id,
        _aware(row.created_at),
        row.owner,
        outbox_id=row.outbox_id,
    )


HandOff = Callable[[AsyncConnection, "Scrap"], Awaitable[str]]
"""Writes a scrap's job request in the scrap's own transaction; returns its outbox id."""


@dataclass(frozen=True, slots=True)
class WebSession:
    username: str
    csrf_token: str
    expires_at: datetime


class UserExistsError(Exception):
    """``users create`` of a name that is taken."""


# san-web's SQLite file: WAL (pages read while the outbox, the inbox and the planner
# write), a wait for the write lock, and each commit on disk before a scrap is
# acknowledged. Every transaction begins IMMEDIATE: eight scraps posted at once (each a
# read, then writes) failed 503 "database is locked" when a deferred transaction could
# not upgrade its lock after another's commit, and so did the outbox relay's claim.
SQLITE_PRAGMAS = (
    "journal_mode=WAL",
    f"busy_timeout={SQLITE_BUSY_TIMEOUT_MS}",
    "synchronous=FULL",
)


class ScrapStore:
    """Every read and write of the scraps table."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    @classmethod
    async def open(cls, database_url: str) -> ScrapStore:
        # The scraps hold what users saved: a private file (0600) in a private folder
        # (0700 when made here), as job-service's database.
        prepare_sqlite_url(database_url)
        engine = create_async_engine(database_url)
        if engine.dialect.name == "sqlite":
            configure_sqlite(engine, SQLITE_PRAGMAS, begin="IMMEDIATE")
        async with engine.begin() as connection:
            await connection.run_sync(metadata.create_all)
            await connection.run_sync(_add_missing_columns)
            await create_outbox_table(connection)
            await create_inbox_tables(connection)
        return cls(engine)

    @property
    def engine(self) -> AsyncEngine:
        """The engine of san-web's database (the outbox relay reads the same one)."""
        return self._engine

    async def close(self) -> None:
        await self._engine.dispose()

    async def add(
        self,
        *,
        url: str,
        title: str,
        text: str,
        owner: str | None = None,
        hand_off: HandOff | None = None,
    ) -> Scrap:
        """Save a scrap; with ``hand_off``, its job request is written in the same
        transaction, so the two are committed (or rolled back) together."""
        scrap = Scrap(str(uuid.uuid4()), url, title, text, None, datetime.now(UTC), owner)
        async with self._engine.begin() as connection:
            outbox_id = None if hand_off is None else await hand_off(connection, scrap)
            await connection.execute(
                scraps.insert().values(
                    id=scrap.id,
                    url=url,
                    title=title,
                    text=text,
                    created_at=scrap.created_at,
                    owner=owner,
                    outbox_id=outbox_id,
                )
            )
        return Scrap(scrap.id, url, title, text, None, scrap.created_at, owner, outbox_id=outbox_id)

    async def add_analysis_request(self, scrap_id: str, owner: str | None) -> str:
        """A new request id for an analysis of ``scrap_id``, recorded before it is sent."""
        request_id = f"analysis:{uuid.uuid4()}"
        async with self._engine.begin() as connection:
            await connection.execute(
                analysis_requests.insert().values(
                    request_id=request_id, scrap_id=scrap_id, owner=owner
                )
            )
        return request_id

    async def set_job(self, scrap_id: str, job_id: str, owner: str | None = None) -> None:
        async with self._engine.begin() as connection:
            await connection.execute(
                scraps.update().where(scraps.c.id == scrap_id).values(job_id=job_id)
            )
        await self._record_job(scrap_id, job_id, owner)

    async def record_delivery(self, outbox_id: str, job_id: str) -> None:
        """The outbox delivered ``outbox_id`` as job ``job_id``: the scrap learns its
        job (unless a newer analysis already replaced it) and its owner may see it."""
        async with self._engine.begin() as connection:
            row = (
                await connection.execute(
                    sa.select(scraps.c.id, scraps.c.owner).where(scraps.c.outbox_id == outbox_id)
                )
            ).first()
            if row is None:
                return  # the scrap was deleted meanwhile
            await connection.execute(
                scraps.update()
                .where(scraps.c.id == row.id, scraps.c.job_id.is_(None))
                .values(job_id=job_id)
            )
        await self._record_job(row.id, job_id, row.owner)

    async def _record_job(self, scrap_id: str, job_id: str, owner: str | None) -> None:
        # The same job id again (an idempotent answer, or the relay and a page view
        # recording one delivery at once) is already recorded: the primary key says so.
        try:
            async with self._engine.begin() as connection:
                await connection.execute(
                    scrap_jobs.insert().values(job_id=job_id, scrap_id=scrap_id, owner=owner)
                )
        except sa_exc.IntegrityError:
            pass

    async def get(self, scrap_id: str, *, owner: str | None = None) -> Scrap | None:
        """The scrap, or None if there is none or (when ``owner`` is given) it is
        someone else's: the two look the same to the caller."""
        query = sa.select(scraps).where(scraps.c.id == scrap_id)
        if owner is not None:
            query = query.where(scraps.c.owner == owner)
        async with self._engine.connect() as connection:
            row = (await connection.execute(query)).first()
        return None if row is None else _scrap(row)

    async def owns_job(self, job_id: str, owner: str) -> bool:
        """Whether san-web made job ``job_id`` for a scrap of ``owner``, or as the
        current note or recall job of one of their days."""
        query = sa.select(scrap_jobs.c.job_id).where(
            scrap_jobs.c.job_id == job_id, scrap_jobs.c.owner == owner
        )
        day_job = sa.select(daily_notes.c.day).where(
            daily_notes.c.owner_key == owner,
            sa.or_(daily_notes.c.til_job_id == job_id, daily_notes.c.recall_job_id == job_id),
        )
        async with self._engine.connect() as connection:
            if (await connection.execute(query)).first() is not None:
                return True
            return (await connection.execute(day_job)).first() is not None

    async def set_time_zone(self, name: str, time_zone: str | None) -> bool:
        """The user's time zone (an IANA name the caller checked; None: san-web's
        default); False if there is no such user."""
        async with self._engine.begin() as connection:
            result = await connection.execute(
                users.update().where(users.c.name == name).values(time_zone=time_zone)
            )
        return bool(result.rowcount)

    async def time_zones(self) -> dict[str, str | None]:
        """Every user's stored time zone (None: the default), by name."""
        return {name: zone for name, (zone, _) in (await self.day_ends()).items()}

    async def day_ends(self) -> dict[str, tuple[str | None, str | None]]:
        """Every user's stored time zone and end of day (None: the default), by name."""
        async with self._engine.connect() as connection:
            rows = await connection.execute(
                sa.select(users.c.name, users.c.time_zone, users.c.til_at)
            )
            return {row.name: (row.time_zone, row.til_at) for row in rows}

    async def set_til_at(self, name: str, til_at: str | None) -> bool:
        """The user's end of day (HH:MM the caller checked; None: san-web's --til-at);
        False if there is no such user."""
        async with self._engine.begin() as connection:
            result = await connection.execute(
                users.update().where(users.c.name == name).values(til_at=til_at)
            )
        return bool(result.rowcount)

    async def list_page(
        self, *, owner: str | None = None, limit: int, after: ScrapCursor | None = None
    ) -> list[Scrap]:
        """Scraps newest first (with ``owner``: only theirs), at most ``limit``, those
        after ``after`` (the last one of the previous page) when it is given."""
        query = sa.select(scraps).order_by(scraps.c.created_at.desc(), scraps.c.id.desc())
        if owner is not None:
            query = query.where(scraps.c.owner == owner)
        if after is not None:
            query = query.where(
                sa.or_(
                    scraps.c.created_at < after.created_at,
                    sa.and_(scraps.c.created_at == after.created_at, scraps.c.id < after.id),
                )
            )
        async with self._engine.connect() as connection:
            rows = (await connection.execute(query.limit(limit))).all()
        return [_scrap(row) for row in rows]

    async def delete(self, scrap_id: str) -> bool:
        """Delete the scrap, its jobs' records and its card, in one transaction."""
        async with self._engine.begin() as connection:
            await connection.execute(scrap_jobs.delete().where(scrap_jobs.c.scrap_id == scrap_id))
            await connection.execute(
                knowledge_cards.delete().where(knowledge_cards.c.scrap_id == scrap_id)
            )
            await connection.execute(
                analysis_requests.delete().where(analysis_requests.c.scrap_id == scrap_id)
            )
            # Its questions stay (they are the day's) but no longer lead to it.
            await connection.execute(
                recall_questions.update()
                .where(recall_questions.c.scrap_id == scrap_id)
                .values(scrap_id=None)
            )
            result = await connection.execute(scraps.delete().where(scraps.c.id == scrap_id))
        return bool(result.rowcount)

    async def add_user(self, name: str, password_hash: str, role: str = DEFAULT_ROLE) -> None:
        """A new user with ``role`` (one of :data:`WEB_ROLES`); :class:`UserExistsError`
        if the name is taken."""
        async with self._engine.begin() as connection:
            taken = await connection.execute(sa.select(users.c.name).where(users.c.name == name))
            if taken.first() is not None:
                raise UserExistsError(name)
            await connection.execute(
                users.insert().values(
                    name=name,
                    password_hash=password_hash,
                    created_at=datetime.now(UTC),
                    role=role,
                )
            )

    async def password_hash(self, name: str) -> str | None:
        async with self._engine.connect() as connection:
            row = (
                await connection.execute(
                    sa.select(users.c.password_hash).where(users.c.name == name)
                )
            ).first()
        return None if row is None else str(row.password_hash)

    async def role(self, name: str) -> str | None:
        """The user's role (None: no such user). Read for each /ops request, so that
        `san-web users set-role` takes effect at once, on live sessions too."""
        async with self._engine.connect() as connection:
            row = (
                await connection.execute(sa.select(users.c.role).where(users.c.name == name))
            ).first()
        return None if row is None else str(row.role)

    async def set_role(self, name: str, role: str) -> bool:
        """Give the user ``role``; False if there is no such user."""
        async with self._engine.begin() as connection:
            result = await connection.execute(
                users.update().where(users.c.name == name).values(role=role)
            )
        return bool(result.rowcount)

    async def change_password(self, name: str, password_hash: str) -> int | None:
        """A new password for ``name``, and every session of theirs ended (whoever
        learnt the old one is logged out too); how many, or None: no such user."""
        async with self._engine.begin() as connection:
            changed = await connection.execute(
                users.update().where(users.c.name == name).values(password_hash=password_hash)
            )
            if not changed.rowcount:
                return None
            ended = await connection.execute(
                web_sessions.delete().where(web_sessions.c.username == name)
            )
        return int(ended.rowcount)

    async def end_sessions(self, name: str) -> int | None:
        """Log ``name`` out everywhere; how many sessions ended, or None: no such user."""
        async with self._engine.begin() as connection:
            found = await connection.execute(sa.select(users.c.name).where(users.c.name == name))
            if found.first() is None:
                return None
            ended = await connection.execute(
                web_sessions.delete().where(web_sessions.c.username == name)
            )
        return int(ended.rowcount)

    async def delete_user(self, name: str) -> tuple[int, int] | None:
        """Remove ``name``, their sessions, scraps and days, in one transaction: a user
        made later under the same name must not inherit them (scraps belong to a name).
        The numbers of sessions and scraps removed, or None: no such user. Their jobs
        stay in JobService, no longer reachable through san-web."""
        async with self._engine.begin() as connection:
            removed = await connection.execute(users.delete().where(users.c.name == name))
            if not removed.rowcount:
                return None
            sessions = await connection.execute(
                web_sessions.delete().where(web_sessions.c.username == name)
            )
            await connection.execute(scrap_jobs.delete().where(scrap_jobs.c.owner == name))
            owned_ids = sa.select(scraps.c.id).where(scraps.c.owner == name)
            for table in (knowledge_cards, analysis_requests):
                await connection.execute(table.delete().where(table.c.scrap_id.in_(owned_ids)))
            for day_table in (daily_notes, recall_questions):
                await connection.execute(day_table.delete().where(day_table.c.owner_key == name))
            owned = await connection.execute(scraps.delete().where(scraps.c.owner == name))
        return int(sessions.rowcount), int(owned.rowcount)

    async def set_password_hash(self, name: str, password_hash: str) -> None:
        """Store a re-hash (argon2 parameters raised since the user was made)."""
        async with self._engine.begin() as connection:
            await connection.execute(
                users.update().where(users.c.name == name).values(password_hash=password_hash)
            )

    async def add_session(
        self, token_hash: str, username: str, csrf_token: str, expires_at: datetime
    ) -> None:
        async with self._engine.begin() as connection:
            # Expired sessions go when anyone logs in: the table stays small.
            now = datetime.now(UTC)
            await connection.execute(web_sessions.delete().where(web_sessions.c.expires_at < now))
            await connection.execute(
                web_sessions.insert().values(
                    token_hash=token_hash,
                    username=username,
                    csrf_token=csrf_token,
                    expires_at=expires_at,
                )
            )

    async def get_session(self, token_hash: str) -> WebSession | None:
        """The live session with this hash (None if unknown, expired, or its user is
        gone: a login that finished while `users delete` ran leaves no way in)."""
        query = (
            sa.select(web_sessions)
            .join(users, users.c.name == web_sessions.c.username)
            .where(
                web_sessions.c.token_hash == token_hash,
                web_sessions.c.expires_at > datetime.now(UTC),
            )
        )
        async with self._engine.connect() as connection:
            row = (await connection.execute(query)).first()
        if row is None:
            return None
        return WebSession(row.username, row.csrf_token, _aware(row.expires_at))

    async def delete_session(self, token_hash: str) -> None:
        async with self._engine.begin() as connection:
            await connection.execute(
                web_sessions.delete().where(web_sessions.c.token_hash == token_hash)
            )


def _aware(moment: datetime) -> datetime:
    """SQLite gives back naive datetimes; they were stored in UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _add_missing_columns(connection: sa.Connection) -> None:
    """A scraps table made by an older san-web gets the columns added since: owner
    (NULL: those scraps belong to no user, so no user sees them under --auth password)
    and outbox_id (NULL: they were handed off before the outbox). A users table gets
    role, every existing user a plain "user" (no one gains /ops by an upgrade),
    time_zone (NULL: san-web's --time-zone) and til_at (NULL: --til-at)."""
    inspector = sa.inspect(connection)
    columns = {column["name"] for column in inspector.get_columns("scraps")}
    for name in ("owner", "outbox_id"):
        if name not in columns:
            length = 64 if name == "owner" else 36
            connection.execute(sa.text(f"ALTER TABLE scraps ADD COLUMN {name} VARCHAR({length})"))
    user_columns = {column["name"] for column in inspector.get_columns("users")}
    if "time_zone" not in user_columns:
        connection.execute(sa.text("ALTER TABLE users ADD COLUMN time_zone VARCHAR(64)"))
    if "til_at" not in user_columns:
        connection.execute(sa.text("ALTER TABLE users ADD COLUMN til_at VARCHAR(8)"))
    if "role" not in user_columns:
        connection.execute(
            sa.text(
                f"ALTER TABLE users ADD COLUMN role VARCHAR(16) NOT NULL DEFAULT '{DEFAULT_ROLE}'"
            )
        )
