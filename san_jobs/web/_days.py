"""san-web's days: each user's "today I learned" note and its recall questions.

A day is the span between two ends of day (``--til-at``, 21:00 by default, in the
owner's time zone): day D holds the scraps saved from D-1 at til-at up to D at til-at,
so a scrap saved after the end of day belongs to the next one and none falls between.

When a day has ended and its owner saved scraps in it, the :class:`DayPlanner` (each
san-web instance runs one, every ``--day-check-interval`` seconds) makes it: a
TIL_GENERATION whose notes are the day's cards from san-web's own ``knowledge_cards``
(their jobs may be pruned by then) and which depends on the card jobs still without a
card (JobService adds their summaries when they complete, or cancels the note naming
the one that FAILED), then a RECALL_GENERATION about the same cards (titles and
summaries, so each question leads back to its scrap), depending on the note and on
those card jobs. A day missed while san-web was down is made when it is back, within
the last :data:`CATCH_UP_DAYS` days.

Exactly once, however many instances run and restart: the day's ``daily_notes`` row is
inserted once (its primary key), its ``plan`` (what the jobs are sent with) is stored
before anything is sent and whoever stored it first is whom every instance follows,
and the jobs' request ids are the day's (``til:<owner>:<day>``, ``recall:<owner>:<day>``,
with ``:<generation>`` for a day made again): JobService returns the same job to every
sender. A day whose jobs could not be sent (JobService down) is sent on the next check.

The results come home through the change feed (:func:`apply_day_change`, called by
the same inbox as the cards): the note into ``daily_notes``, the questions into
``recall_questions``, a FAILED or CANCELLED job's message into the day's row.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import sqlalchemy as sa
import sqlalchemy.exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection

from san_jobs.client import (
    AsyncJobsClient,
    InvalidJobStateError,
    InvalidRequestError,
    JobNotFoundError,
    JobsError,
    JobStatus,
    RecallGenerationInput,
    RecallSource,
    TilGenerationInput,
)
from san_jobs.client.outbox import Outbox
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.shared.background import BackgroundLoop
from san_jobs.shared.display import status_name
from san_jobs.shared.input_rules import usable_key_terms
from san_jobs.web._store import (
    ScrapStore,
    daily_notes,
    knowledge_cards,
    recall_questions,
    scrap_jobs,
    scraps,
)

log = logging.getLogger("san_web.days")

REQUESTED_BY = "san-web"  # san_jobs.web.app.REQUESTED_BY
SHARED_KEY = "_"  # the shared space of --auth off: no user name starts with "_"
DEFAULT_TIL_AT = time(21, 0)
DEFAULT_TIME_ZONE = "UTC"
DEFAULT_CHECK_INTERVAL = 30.0
CATCH_UP_DAYS = 7
# Each making of a day is a note and questions on the provider's budget: a page looping
# on generate stops here (the planner's making counts as one).
MAX_GENERATIONS = 10
# Days whose span (and its zone's offsets) datetime can hold, with room on both sides.
FIRST_DAY, LAST_DAY = date(1970, 1, 2), date(9998, 12, 31)
# The planner's jobs are bulk work; a day made on request (generate) has a reader.
PLANNED_PRIORITY = 4
REQUESTED_PRIORITY = 1
# What one day's jobs may carry (JobService's limits: 1,000 notes, 100 sources; its 100
# dependencies are more than MAX_WAITING_CARDS below).
MAX_NOTES = 1000
MAX_SOURCES = 100
# The gateway refuses, for good, a call whose input it estimates above its
# --max-input-tokens (8,192 by default): a TIL of 150 cards' summaries failed. What
# san-web sends is condensed to INPUT_TOKENS by the gateway's own estimate (the notes;
# apart, the recall's titles and texts), less SUMMARY_TOKENS for each card still
# being made (JobService adds its summary, whole) and, for the recall, NOTE_TOKENS for
# the day's note (JobService adds it as a source).
INPUT_TOKENS = 6000
NOTE_TOKENS = 1500
MIN_BUDGET_TOKENS = 1000
# The longest summary a card's job adds, by the gateway's estimate: the built-in
# backend's is at most three sentences of 400 characters (ai_gateway/backends/local/
# summarize.py); an upstream model is asked for three sentences. At 40 tokens each, a
# hundred cards still being made at the end of a day came to 22,530 tokens.
SUMMARY_TOKENS = 300
# Cards still being made that fit beside the day's note in the recall's input: at most
# this many go as dependencies. While more are being made, or their room would leave
# out cards already made (a big day), the day waits for them, at most CARDS_WAIT past
# its end (a provider's outage); then the newest that fit go (the older are likelier
# stuck) and the note says how many of the day's cards it covers.
MAX_WAITING_CARDS = (INPUT_TOKENS - NOTE_TOKENS - MIN_BUDGET_TOKENS) // SUMMARY_TOKENS
CARDS_WAIT = timedelta(minutes=10)
# A card cut below this many tokens says nothing: fewer cards are taken instead.
MIN_CARD_TOKENS = 32
SOURCE_TITLE_TOKENS = 12  # a recall source's title: 48 characters or so
MIN_QUESTIONS, MAX_QUESTIONS = 5, 20
DAYS_PAGE_SIZE, MAX_DAYS_PAGE_SIZE = 30, 100
ACTIVE = (JobStatus.JOB_STATUS_PENDING, JobStatus.JOB_STATUS_PROCESSING)
_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_FAILED_DEPENDENCY = re.compile(r"Dependency ([0-9a-f-]{1,64}) (?:FAILED|CANCELLED)")
_REQUEST_ID = re.compile(
    r"(til|recall):([A-Za-z0-9._@-]{1,64}|_):([0-9]{4}-[0-9]{2}-[0-9]{2})(?::([0-9]{1,9}))?"
)


class DayProblem(Exception):
    """A day that cannot be made as asked (the message says why, for the caller)."""


class DayBusy(DayProblem):
    """The day's note or questions are still being made."""


class NoSuchDay(DayProblem):
    """A day without scraps: there is nothing to make."""


class MadeTooOften(DayProblem):
    """The day was made MAX_GENERATIONS times already."""


def parse_til_at(text: str) -> time:
    """``HH:MM`` (or ``HH:MM:SS``) as a time of day; ValueError says what is wrong."""
    if not re.fullmatch(r"[0-9]{2}:[0-9]{2}(:[0-9]{2})?", text):
        raise ValueError(f"{text!r} is not HH:MM (00:00 to 23:59)")
    try:
        return time.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not HH:MM (00:00 to 23:59)") from None


def time_zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``; ValueError if there is none by that name."""
    if not name or len(name) > 64 or not re.fullmatch(r"[A-Za-z0-9_+\-/]+", name):
        raise ValueError(f"{name!r} is not an IANA time zone name (like Europe/Paris)")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{name!r} is not an IANA time zone name (like Europe/Paris)") from None


def parse_day(text: str) -> date | None:
    """``YYYY-MM-DD`` as a date from FIRST_DAY to LAST_DAY, or None if it is not one."""
    if len(text) != 10 or not _DAY.fullmatch(text):
        return None
    try:
        day = date.fromisoformat(text)
    except ValueError:
        return None
    return day if FIRST_DAY <= day <= LAST_DAY else None


def owner_key(owner: str | None) -> str:
    return SHARED_KEY if owner is None else owner


def _owner_of(key: str) -> str | None:
    return None if key == SHARED_KEY else key


def request_id(kind: str, key: str, day: str, generation: int) -> str:
    """The request id of a day's ``kind`` ("til" or "recall") job of ``generation``."""
    base = f"{kind}:{key}:{day}"
    return base if generation == 1 else f"{base}:{generation}"


def target_id(key: str, day: str) -> str:
    return f"day:{key}:{day}"


@dataclass(frozen=True, slots=True)
class DaySettings:
    """When days end (``til_at`` in each owner's zone, ``default_zone`` for the shared
    space and users without one), how often the planner looks, and whether scraps of no
    owner (--auth off) have days."""

    til_at: time = DEFAULT_TIL_AT
    default_zone: str = DEFAULT_TIME_ZONE
    check_interval: float = DEFAULT_CHECK_INTERVAL
    shared_space: bool = True


@dataclass(frozen=True, slots=True)
class Calendar:
    """One owner's days: where each starts and ends."""

    til_at: time
    zone: ZoneInfo

    def day_of(self, moment: datetime) -> date:
        """The day a scrap saved at ``moment`` belongs to."""
        local = moment.astimezone(self.zone)
        return local.date() + timedelta(days=1) if local.time() >= self.til_at else local.date()

    def window(self, day: date) -> tuple[datetime, datetime]:
        """``day``'s span in UTC: [its start, its end)."""
        end = datetime.combine(day, self.til_at, tzinfo=self.zone)
        start = datetime.combine(day - timedelta(days=1), self.til_at, tzinfo=self.zone)
        return start.astimezone(UTC), end.astimezone(UTC)

    def ended(self, now: datetime, back: int = CATCH_UP_DAYS) -> list[date]:
        """The last ``back`` days that have ended by ``now``, oldest first."""
        current = self.day_of(now)
        return [current - timedelta(days=i) for i in range(back, 0, -1)]


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


_WIDE = re.compile(r"[\uac00-\ud7a3\u1100-\u11ff\u3130-\u318f\u4e00-\u9fff\u3040-\u30ff]")
_ELLIPSIS = "\u2026"


def estimate_tokens(text: str) -> int:
    """The gateway's estimate (san_jobs.ai_gateway.model_tokens, not imported by san-web): a
    Hangul, CJK or kana character is a token, four other characters are one."""
    wide = len(_WIDE.findall(text))
    return wide + math.ceil((len(text) - wide) / 4)


def _cut(text: str, tokens: int) -> str:
    """``text`` cut to at most ``tokens`` estimated tokens, the ellipsis included, at a
    space when one is near the end."""
    if estimate_tokens(text) <= tokens:
        return text
    quarters = (tokens - 1) * 4  # the ellipsis is a token
    end = 0
    for end, char in enumerate(text):  # noqa: B007 (end is used after the loop)
        quarters -= 4 if _WIDE.match(char) else 1
        if quarters < 0:
            break
    kept = text[:end]
    space = kept.rfind(" ")
    if space > len(kept) * 3 // 4:
        kept = kept[:space]
    return kept.rstrip() + _ELLIPSIS


def _shares(costs: list[int], budget: int) -> list[int]:
    """Each cost's share of ``budget``: the small ones whole, the others one same share."""
    shares = [0] * len(costs)
    left = budget
    for placed, index in enumerate(sorted(range(len(costs)), key=costs.__getitem__)):
        shares[index] = min(costs[index], left // (len(costs) - placed))
        left -= shares[index]
    return shares


def condense(texts: list[str], budget: int) -> list[str]:
    """``texts`` within ``budget`` estimated tokens together: all of them whole when they
    fit; else as many of the first as leave each MIN_CARD_TOKENS, each cut to its fair
    share (the short ones whole)."""
    costs = [estimate_tokens(text) for text in texts]
    if sum(costs) <= budget:
        return list(texts)
    taken = max(1, min(len(texts), budget // MIN_CARD_TOKENS))
    shares = _shares(costs[:taken], budget)
    return [_cut(text, share) for text, share in zip(texts[:taken], shares, strict=True)]


class Days:
    """The days of san-web's users: what they hold, making them, and their results."""

    def __init__(
        self,
        store: ScrapStore,
        client: AsyncJobsClient,
        outbox: Outbox,
        settings: DaySettings,
        *,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._store = store
        self._client = client
        self._outbox = outbox
        self.settings = settings
        self._now = now
        # A bug in a check is logged by the loop, and the check runs again a check
        # interval later, as after a database failure.
        self._planner = BackgroundLoop(
            "san-web day planner", self._run, restart_after=settings.check_interval
        )

    # -- calendars ------------------------------------------------------------------------

    async def calendar(self, owner: str | None) -> Calendar:
        ends = {} if owner is None else await self._store.day_ends()
        return self._calendar(ends.get(owner) if owner is not None else None)

    def _calendar(self, stored: tuple[str | None, str | None] | None) -> Calendar:
        """The calendar of a user's stored (zone, end of day); None: san-web's own."""
        stored_zone, stored_til_at = stored or (None, None)
        name = stored_zone or self.settings.default_zone
        try:
            zone = time_zone(name)
        except ValueError:
            log.warning("time zone %r is unknown here; UTC is used", name)
            zone = ZoneInfo("UTC")
        til_at = self.settings.til_at
        if stored_til_at:
            try:
                til_at = parse_til_at(stored_til_at)
            except ValueError:
                log.warning("end of day %r is no time; --til-at is used", stored_til_at)
        return Calendar(til_at, zone)

    async def set_time_zone(self, user: str, name: str | None) -> None:
        await self._store.set_time_zone(user, name)

    async def set_til_at(self, user: str, til_at: str | None) -> None:
        await self._store.set_til_at(user, til_at)

    # -- the planner ----------------------------------------------------------------------

    async def start(self) -> None:
        self._planner.start()

    async def stop(self) -> None:
        await self._planner.stop()

    async def _run(self) -> None:
        while True:
            try:
                await self.plan_ended_days()
            except (sa_exc.SQLAlchemyError, OSError) as error:
                log.warning("day planner: san-web's database failed: %s", error)
            await asyncio.sleep(self.settings.check_interval)

    async def plan_ended_days(self) -> list[tuple[str, str]]:
        """Make every ended day of the last CATCH_UP_DAYS that has scraps and is not
        made yet, and send what a previous check could not; the (owner key, day) made."""
        now = self._now()
        since = now - timedelta(days=CATCH_UP_DAYS + 2)
        ends = await self._store.day_ends()
        query = sa.select(scraps.c.owner, scraps.c.created_at).where(scraps.c.created_at >= since)
        if not self.settings.shared_space:
            query = query.where(scraps.c.owner.is_not(None))
        async with self._store.engine.connect() as conn:
            saved = (await conn.execute(query)).all()
        calendars: dict[str | None, tuple[Calendar, set[date]]] = {}
        due: set[tuple[str, str]] = set()
        for owner, created_at in saved:
            if owner not in calendars:
                calendar = self._calendar(ends.get(owner) if owner is not None else None)
                calendars[owner] = calendar, set(calendar.ended(now))
            calendar, ended = calendars[owner]
            saved_on = calendar.day_of(_aware(created_at))
            if saved_on in ended:
                due.add((owner_key(owner), saved_on.isoformat()))
        if not due:
            return []
        oldest = min(day for _, day in due)
        async with self._store.engine.begin() as conn:
            known = {
                (row.owner_key, row.day): row
                for row in await conn.execute(
                    sa.select(
                        daily_notes.c.owner_key,
                        daily_notes.c.day,
                        daily_notes.c.generation,
                        daily_notes.c.recall_job_id,
                        daily_notes.c.til_status,
                    ).where(daily_notes.c.day >= oldest)
                )
            }
            for key, day in sorted(due - set(known)):
                await _insert_day(conn, key, day, now)
        made: list[tuple[str, str]] = []
        for key, day in sorted(due):
            row = known.get((key, day))
            if row is not None and (row.recall_job_id or row.til_status == "SKIPPED"):
                continue  # made (or nothing to make)
            generation = 1 if row is None else row.generation
            try:
                if await self._make(key, day, generation, PLANNED_PRIORITY):
                    made.append((key, day))
            except JobsError as error:
                log.warning(
                    "day %s of %s not sent yet (%s: %s); tried again in %g s",
                    day, key, error.code.name, error.message, self.settings.check_interval,
                )  # fmt: skip
        return made

    # -- making a day -----------------------------------------------------------------------

    async def generate(self, owner: str | None, day: date) -> tuple[str, str]:
        """Make ``day`` again now (or for the first time, before its end): a new
        generation of its note and questions. DayBusy while the current ones are
        active; DayProblem for a day that has not begun or has no scraps. The note's
        and the questions' job ids."""
        key, text = owner_key(owner), day.isoformat()
        calendar = await self.calendar(owner)
        start, _ = calendar.window(day)
        if start > self._now():
            raise DayProblem(f"day {text} has not begun")
        if not await self._scrap_ids(owner, calendar, day):
            raise NoSuchDay(f"no scraps were saved on {text}")
        async with self._store.engine.begin() as conn:
            inserted = await _insert_day(conn, key, text, self._now())
            row = (
                await conn.execute(
                    sa.select(daily_notes).where(
                        daily_notes.c.owner_key == key, daily_notes.c.day == text
                    )
                )
            ).one()
        generation = row.generation
        if not inserted:
            if generation >= MAX_GENERATIONS:
                raise MadeTooOften(f"day {text} was made {generation} times; no more")
            await self._refuse_if_active(row)
            # One more generation, only from the one read: of two calls at once, one
            # moves it and the other is told the day is busy.
            async with self._store.engine.begin() as conn:
                moved = await conn.execute(
                    daily_notes.update()
                    .where(
                        daily_notes.c.owner_key == key,
                        daily_notes.c.day == text,
                        daily_notes.c.generation == generation,
                    )
                    .values(
                        generation=generation + 1,
                        plan=None,
                        til_job_id=None,
                        recall_job_id=None,
                        til_status=None,
                        til_error=None,
                        recall_status=None,
                        recall_error=None,
                    )
                )
            if not moved.rowcount:
                raise DayBusy(f"day {text} is being made")
            generation += 1
        await self._make(key, text, generation, REQUESTED_PRIORITY, deferrable=False)
        made = await self._row(key, text)
        if made is None or made.til_status == "SKIPPED":
            raise DayProblem(f"no scrap of {text} has a card or a job yet")
        return made.til_job_id or "", made.recall_job_id or ""

    async def remake_without(
        self, owner: str | None, scrap_id: str, cancelled: list[str]
    ) -> list[str]:
        """A scrap of `owner`'s was deleted (`cancelled`: its card jobs that were still
        being made, which JobService cancelled, and with them any day's note and
        questions waiting for them). Every day whose current making holds the scrap,
        as a note sent or as a card awaited, and whose note has not run yet, is made
        again without it (its next generation; a note still waiting or running is
        cancelled first): a scrap deleted before its day's note runs is left out, not
        the whole day. The days made again; a day that cannot be (made too often, no
        scrap left) keeps its state and the log says why."""
        async with self._store.engine.connect() as conn:
            rows = (
                await conn.execute(
                    sa.select(daily_notes)
                    .where(daily_notes.c.owner_key == owner_key(owner))
                    .where(daily_notes.c.plan.is_not(None))
                    .where(
                        sa.or_(
                            daily_notes.c.til_status.is_(None),
                            daily_notes.c.til_status != "COMPLETED",
                        )
                    )
                )
            ).all()
        remade: list[str] = []
        for row in rows:
            plan = row.plan or {}
            awaited = set(plan.get("depends_on", ())) & set(cancelled)
            if not awaited and scrap_id not in plan.get("scrapIds", ()):
                continue
            for job_id in (row.til_job_id, row.recall_job_id):
                if job_id:
                    with contextlib.suppress(InvalidJobStateError, JobNotFoundError):
                        await self._client.cancel_job(job_id, reason="a scrap of the day deleted")
            try:
                await self.generate(owner, date.fromisoformat(row.day))
            except (DayProblem, JobsError) as error:
                log.warning("day %s of %s not made again without a deleted scrap: %s",
                            row.day, owner_key(owner), error)  # fmt: skip
                continue
            remade.append(row.day)
        return remade

    async def _refuse_if_active(self, row: Any) -> None:
        for job_id in (row.til_job_id, row.recall_job_id):
            if not job_id:
                continue
            try:
                job = await self._client.get_job(job_id)
            except JobNotFoundError:
                continue
            if job.status in ACTIVE:
                state = status_name(job.status)
                raise DayBusy(f"day {row.day} is being made (job {job_id} is {state})")

    async def _make(
        self, key: str, day: str, generation: int, priority: int, *, deferrable: bool = True
    ) -> bool:
        """Send generation ``generation`` of the day's note and questions (each once:
        the request ids say which); False if it waits for a scrap's hand-off, has
        nothing to send, or another generation took its place."""
        plan = await self._plan(key, day, generation, deferrable=deferrable)
        if plan is None:
            return False
        row = await self._row(key, day)
        if row is None or row.generation != generation:
            return False
        til_id = row.til_job_id
        if not til_id:
            til_id = await self._send_note(key, day, generation, plan, priority)
            if til_id is None:
                return False
        recall = RecallGenerationInput(
            sources=[
                RecallSource(title=s["title"], text=s["text"], key_terms=s.get("tags", []))
                for s in plan["sources"]
            ],
            question_count=min(
                MAX_QUESTIONS, max(MIN_QUESTIONS, len(plan["sources"]) + len(plan["depends_on"]))
            ),
        )
        answer = await self._client.enqueue(
            target_id(key, day),
            recall,
            requested_by=REQUESTED_BY,
            request_id=request_id("recall", key, day, generation),
            depends_on=[til_id, *plan["depends_on"]],
            priority=priority,
        )
        await self._record(key, day, generation, recall_job_id=answer.job.id)
        log.info(
            "day %s of %s: note job_id=%s, questions job_id=%s (generation %d)",
            day, key, til_id, answer.job.id, generation,
        )  # fmt: skip
        return True

    async def _send_note(
        self, key: str, day: str, generation: int, plan: dict[str, Any], priority: int
    ) -> str | None:
        for _ in range(2):
            try:
                answer = await self._client.enqueue(
                    target_id(key, day),
                    TilGenerationInput(day=day, notes=plan["notes"]),
                    requested_by=REQUESTED_BY,
                    request_id=request_id("til", key, day, generation),
                    depends_on=plan["depends_on"],
                    priority=priority,
                )
            except InvalidRequestError as error:
                # A card job JobService no longer knows (pruned): the day goes on
                # without it, as every instance will (the plan is rewritten).
                gone = _refused_dependencies(error, plan["depends_on"])
                if not gone:
                    raise
                log.warning("day %s of %s: card jobs %s are gone; left out", day, key, gone)
                plan = {**plan, "depends_on": [d for d in plan["depends_on"] if d not in gone]}
                async with self._store.engine.begin() as conn:
                    await conn.execute(
                        daily_notes.update()
                        .where(*_this(key, day, generation), daily_notes.c.til_job_id.is_(None))
                        .values(plan=plan)
                    )
                continue
            await self._record(key, day, generation, til_job_id=answer.job.id)
            return answer.job.id
        return None

    async def _plan(
        self, key: str, day: str, generation: int, *, deferrable: bool
    ) -> dict[str, Any] | None:
        """The day's plan: the one stored, else one made now and stored (unless another
        instance stored one first: that one). None while a scrap of the day is still
        being handed to JobService, or when there is nothing to send."""
        row = await self._row(key, day)
        if row is None or row.generation != generation:
            return None
        if row.plan is not None:
            return None if row.til_status == "SKIPPED" else dict(row.plan)
        owner = _owner_of(key)
        calendar = await self.calendar(owner)
        plan = await self._new_plan(owner, calendar, date.fromisoformat(day), wait=deferrable)
        if isinstance(plan, str):
            if deferrable:
                log.info("day %s of %s waits: %s", day, key, plan)
                return None
            raise DayProblem(plan)
        empty = not plan["notes"] and not plan["depends_on"]
        async with self._store.engine.begin() as conn:
            values: dict[str, Any] = {"plan": plan}
            if empty:
                values |= {"til_status": "SKIPPED", "til_error": "no scrap of the day has a card"}
            await conn.execute(
                daily_notes.update()
                .where(*_this(key, day, generation), daily_notes.c.plan.is_(None))
                .values(**values)
            )
        stored = await self._row(key, day)
        if stored is None or stored.generation != generation or stored.til_status == "SKIPPED":
            return None
        return dict(stored.plan)

    async def _new_plan(
        self, owner: str | None, calendar: Calendar, day: date, *, wait: bool
    ) -> dict[str, Any] | str:
        """The day's plan, or why it waits (a scrap not yet handed to JobService; with
        `wait`, more cards still being made than fit, for CARDS_WAIT past its end)."""
        start, end = calendar.window(day)
        query = (
            sa.select(
                scraps.c.id,
                scraps.c.title,
                scraps.c.job_id,
                scraps.c.outbox_id,
                knowledge_cards.c.summary,
                knowledge_cards.c.tags,
            )
            .outerjoin(knowledge_cards, knowledge_cards.c.scrap_id == scraps.c.id)
            .where(scraps.c.created_at >= start, scraps.c.created_at < end, _owned_by(owner))
            .order_by(scraps.c.created_at, scraps.c.id)
        )
        async with self._store.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        unsent = [r.outbox_id for r in rows if r.summary is None and not r.job_id and r.outbox_id]
        entries = await self._outbox.entries(unsent)
        cards: list[dict[str, Any]] = []
        depends_on: list[str] = []
        for row in rows:
            if row.summary is not None and row.summary.strip():
                cards.append(
                    {
                        "scrapId": row.id,
                        "title": row.title[:1000],
                        "text": row.summary,
                        # Its tags: the quiz's key terms (what a question blanks first).
                        "tags": usable_key_terms(row.tags),
                    }
                )
                continue
            job_id = row.job_id
            entry = entries.get(row.outbox_id) if row.outbox_id else None
            if not job_id and entry is not None:
                if entry.state == "queued":
                    return f"a scrap of {day} is not yet handed to JobService"
                job_id = entry.job_id
            if job_id and job_id not in depends_on:
                depends_on.append(job_id)
        total = len(cards) + len(depends_on)
        texts = [card["text"] for card in cards[:MAX_NOTES]]
        if depends_on and not _all_fit(texts, len(depends_on)):
            _, end = calendar.window(day)
            if wait and self._now() < end + CARDS_WAIT:
                return f"{len(depends_on)} of its {total} cards are still being made"
            depends_on = depends_on[-MAX_WAITING_CARDS:]
        waiting = SUMMARY_TOKENS * len(depends_on)
        notes = condense(texts, _notes_budget(len(depends_on)))
        # Each source costs its title and at least MIN_CARD_TOKENS of its text.
        budget = max(MIN_BUDGET_TOKENS, INPUT_TOKENS - NOTE_TOKENS - waiting)
        asked: list[dict[str, Any]] = []
        titles = 0
        for card in cards[: MAX_SOURCES - 1 - len(depends_on)]:
            title = _cut(card["title"], SOURCE_TITLE_TOKENS)
            if titles + estimate_tokens(title) + MIN_CARD_TOKENS * (len(asked) + 1) > budget:
                break
            asked.append({**card, "title": title})
            titles += estimate_tokens(title)
        texts = condense([card["text"] for card in asked], budget - titles)
        sources = [{**card, "text": text} for card, text in zip(asked, texts, strict=True)]
        return {
            "notes": notes,
            # The scraps whose cards the notes are (a deleted one remakes the day).
            "scrapIds": [card["scrapId"] for card in cards[: len(notes)]],
            "sources": sources,
            "depends_on": depends_on,
            # How many of the day's cards the note covers (the others did not fit).
            "cards": {"covered": len(notes) + len(depends_on), "of": total},
        }

    async def _scrap_ids(self, owner: str | None, calendar: Calendar, day: date) -> list[str]:
        start, end = calendar.window(day)
        query = (
            sa.select(scraps.c.id)
            .where(scraps.c.created_at >= start, scraps.c.created_at < end, _owned_by(owner))
            .order_by(scraps.c.created_at, scraps.c.id)
        )
        async with self._store.engine.connect() as conn:
            return [str(row.id) for row in await conn.execute(query)]

    async def _row(self, key: str, day: str) -> Any:
        async with self._store.engine.connect() as conn:
            return (
                await conn.execute(
                    sa.select(daily_notes).where(
                        daily_notes.c.owner_key == key, daily_notes.c.day == day
                    )
                )
            ).first()

    async def _record(self, key: str, day: str, generation: int, **job_ids: str) -> None:
        [(column, job_id)] = job_ids.items()
        async with self._store.engine.begin() as conn:
            await conn.execute(
                daily_notes.update()
                .where(*_this(key, day, generation), daily_notes.c[column].is_(None))
                .values({column: job_id})
            )

    # -- reading -------------------------------------------------------------------------

    async def list_days(
        self, owner: str | None, limit: int = DAYS_PAGE_SIZE, before: date | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """The owner's made days newest first (only those before ``before``, when
        given), the open day first if it has scraps (on the first page), each with its
        numbers of questions and scraps; and the next page's token ("": none)."""
        key = owner_key(owner)
        calendar = await self.calendar(owner)
        today = calendar.day_of(self._now())
        counted = (
            sa.select(sa.func.count())
            .select_from(recall_questions)
            .where(recall_questions.c.owner_key == key, recall_questions.c.day == daily_notes.c.day)
            .scalar_subquery()
        )
        query = sa.select(daily_notes, counted.label("question_count")).where(
            daily_notes.c.owner_key == key
        )
        if before is not None:
            query = query.where(daily_notes.c.day < before.isoformat())
        query = query.order_by(daily_notes.c.day.desc()).limit(limit + 1)
        async with self._store.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        more, rows = len(rows) > limit, rows[:limit]
        days = [
            _day_view(row, has_questions=row.question_count > 0)
            | {"questionCount": int(row.question_count)}
            for row in rows
        ]
        if (
            before is None
            and today.isoformat() not in {row.day for row in rows}
            and await self._scrap_ids(owner, calendar, today)
        ):
            days.insert(0, self._open_day(today, calendar) | {"questionCount": 0})
        counts = await self._scrap_counts(owner, calendar, [d["day"] for d in days])
        for shown in days:
            shown["scrapCount"] = counts.get(shown["day"], 0)
        return days, rows[-1].day if more else ""

    async def _scrap_counts(
        self, owner: str | None, calendar: Calendar, days: list[str]
    ) -> dict[str, int]:
        """How many scraps the owner saved in each of ``days``."""
        if not days:
            return {}
        start = calendar.window(date.fromisoformat(min(days)))[0]
        end = calendar.window(date.fromisoformat(max(days)))[1]
        query = sa.select(scraps.c.created_at).where(
            scraps.c.created_at >= start, scraps.c.created_at < end, _owned_by(owner)
        )
        counts: dict[str, int] = {}
        async with self._store.engine.connect() as conn:
            for (created_at,) in await conn.execute(query):
                saved_on = calendar.day_of(_aware(created_at)).isoformat()
                counts[saved_on] = counts.get(saved_on, 0) + 1
        return counts

    def _open_day(self, day: date, calendar: Calendar) -> dict[str, Any]:
        return {
            "day": day.isoformat(),
            "status": "OPEN",
            "endsAt": calendar.window(day)[1].isoformat(),
            "note": None,
            "hasQuestions": False,
            "error": None,
            "cards": None,
        }

    async def day(self, owner: str | None, day: date) -> dict[str, Any] | None:
        """The day: its note, questions and scraps; None if it has none of them."""
        key, text = owner_key(owner), day.isoformat()
        calendar = await self.calendar(owner)
        start, end = calendar.window(day)
        # The day's row and its questions in one statement: read apart, the questions
        # could be home (they and the recall's status are committed together) while the
        # row read just before still said MAKING, and the page showed a quiz of a day
        # being made.
        found = sa.and_(
            recall_questions.c.owner_key == daily_notes.c.owner_key,
            recall_questions.c.day == daily_notes.c.day,
        )
        joined = (
            sa.select(
                daily_notes,
                recall_questions.c.position.label("q_position"),
                recall_questions.c.job_id.label("q_job_id"),
                recall_questions.c.question.label("q_question"),
                recall_questions.c.answer.label("q_answer"),
                recall_questions.c.source_title.label("q_source_title"),
                recall_questions.c.scrap_id.label("q_scrap_id"),
            )
            .select_from(daily_notes.outerjoin(recall_questions, found))
            .where(daily_notes.c.owner_key == key, daily_notes.c.day == text)
            .order_by(recall_questions.c.position)
        )
        async with self._store.engine.connect() as conn:
            rows = (await conn.execute(joined)).all()
            row = rows[0] if rows else None
            questions = [q for q in rows if q.q_position is not None]
            saved = (
                await conn.execute(
                    sa.select(scraps.c.id, scraps.c.title, scraps.c.url, knowledge_cards.c.summary)
                    .outerjoin(knowledge_cards, knowledge_cards.c.scrap_id == scraps.c.id)
                    .where(
                        scraps.c.created_at >= start, scraps.c.created_at < end, _owned_by(owner)
                    )
                    .order_by(scraps.c.created_at, scraps.c.id)
                )
            ).all()
        if row is None and not saved:
            return None
        view = (
            self._open_day(day, calendar)
            if row is None
            else _day_view(row, has_questions=bool(questions))
        )
        view |= {
            "startsAt": start.isoformat(),
            "endsAt": end.isoformat(),
            "timeZone": calendar.zone.key,
            "questions": [
                {
                    "id": f"{q.q_job_id}:{q.q_position}",
                    "question": q.q_question,
                    "answer": q.q_answer,
                    "sourceTitle": q.q_source_title,
                    "scrapId": q.q_scrap_id,
                }
                for q in questions
            ],
            "scraps": [
                {"scrapId": s.id, "title": s.title, "url": s.url, "summary": s.summary}
                for s in saved
            ],
        }
        view["failedScrap"] = await self._failed_scrap(owner, view.get("error"))
        return view

    async def _failed_scrap(self, owner: str | None, error: str | None) -> dict[str, str] | None:
        """The owner's scrap whose card job the day's note or questions were cancelled
        for (JobService says ``Dependency <job id> FAILED``), or None."""
        found = _FAILED_DEPENDENCY.search(error or "")
        if found is None:
            return None
        query = (
            sa.select(scraps.c.id, scraps.c.title)
            .join(scrap_jobs, scrap_jobs.c.scrap_id == scraps.c.id)
            .where(scrap_jobs.c.job_id == found[1], _owned_by(owner))
        )
        async with self._store.engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else {"scrapId": str(row.id), "title": str(row.title)}

    # -- results coming home ----------------------------------------------------------------

    async def apply_job_change(self, conn: AsyncConnection, job: pb.Job) -> None:
        """The change feed's handler for the days' jobs (in the inbox's transaction):
        a note or questions of the day's current generation are written, a FAILED or
        CANCELLED one's message kept; anything else is ignored. Applying a change twice
        leaves what applying it once did."""
        found = _REQUEST_ID.fullmatch(job.request_id)
        if found is None or job.requested_by != REQUESTED_BY:
            return
        kind, key, day, generation = found[1], found[2], found[3], int(found[4] or 1)
        row = (
            await conn.execute(
                sa.select(daily_notes)
                .where(daily_notes.c.owner_key == key, daily_notes.c.day == day)
                .with_for_update()
            )
        ).first()
        if row is None or row.generation != generation:
            log.info("job_id=%s: not the current making of day %s of %s; ignored", job.id, day, key)
            return
        status = status_name(job.status)
        where = _this(key, day, generation)
        if kind == "til":
            values: dict[str, Any] = {
                "til_job_id": job.id,
                "til_status": status,
                "til_error": job.error_message or None,
            }
            if job.status == JobStatus.JOB_STATUS_COMPLETED and job.HasField(
                "til_generation_result"
            ):
                note = job.til_generation_result
                ended = job.complete_time if job.HasField("complete_time") else job.update_time
                values |= {
                    "title": note.title,
                    "body": note.body,
                    "model": note.model,
                    "noted_at": ended.ToDatetime(tzinfo=UTC),
                }
            await conn.execute(daily_notes.update().where(*where).values(**values))
            return
        await conn.execute(
            daily_notes.update()
            .where(*where)
            .values(
                recall_job_id=job.id,
                recall_status=status,
                recall_error=job.error_message or None,
            )
        )
        if job.status != JobStatus.JOB_STATUS_COMPLETED or not job.HasField(
            "recall_generation_result"
        ):
            return
        scrap_of_source = await self._scraps_of_sources(conn, job, row.plan or {}, row.til_job_id)
        await conn.execute(
            recall_questions.delete().where(
                recall_questions.c.owner_key == key, recall_questions.c.day == day
            )
        )
        rows = []
        for position, question in enumerate(job.recall_generation_result.questions):
            title, scrap_id = scrap_of_source.get(question.source_index, ("", None))
            rows.append(
                {
                    "owner_key": key,
                    "day": day,
                    "position": position,
                    "job_id": job.id,
                    "question": question.question,
                    "answer": question.answer,
                    "source_title": title,
                    "scrap_id": scrap_id,
                }
            )
        if rows:
            await conn.execute(recall_questions.insert(), rows)

    async def _scraps_of_sources(
        self, conn: AsyncConnection, job: pb.Job, plan: dict[str, Any], til_job_id: str | None
    ) -> dict[int, tuple[str, str | None]]:
        """Each source index of the recall job: its title and the scrap it came from
        (None: the day's note). The plan's sources come first, in order; JobService
        added the dependencies' after them, which only the job's stored input says (the
        feed's job has no input), so it is read when there were card dependencies."""
        given = list(plan.get("sources", []))
        mapped: dict[int, tuple[str, str | None]] = {
            i: (str(s.get("title", "")), s.get("scrapId")) for i, s in enumerate(given)
        }
        if not plan.get("depends_on"):
            mapped[len(given)] = ("Today I learned", None)
            return mapped
        try:
            stored = await self._client.get_job(job.id)
        except JobNotFoundError:
            return mapped
        sources = stored.recall_generation_input.sources
        added = {s.job_id: i for i, s in enumerate(sources) if i >= len(given) and s.job_id}
        if not added:
            return mapped
        found = await conn.execute(
            sa.select(scrap_jobs.c.job_id, scrap_jobs.c.scrap_id).where(
                scrap_jobs.c.job_id.in_(list(added))
            )
        )
        by_job = {row.job_id: row.scrap_id for row in found}
        for dependency, index in added.items():
            scrap_id = None if dependency == til_job_id else by_job.get(dependency)
            mapped[index] = (sources[index].title, scrap_id)
        return mapped


def _notes_budget(waiting: int) -> int:
    """The tokens of notes san-web sends beside `waiting` cards still being made."""
    return max(MIN_BUDGET_TOKENS, INPUT_TOKENS - SUMMARY_TOKENS * waiting)


def _all_fit(texts: list[str], waiting: int) -> bool:
    """Whether `waiting` cards still being made go as dependencies beside every one of
    `texts` (the cards made) as a note of its own: a big day whose notes the waiting
    cards' room would squeeze out waits for them instead (CARDS_WAIT)."""
    return waiting <= MAX_WAITING_CARDS and len(condense(texts, _notes_budget(waiting))) == len(
        texts
    )


def _owned_by(owner: str | None) -> sa.ColumnElement[bool]:
    return scraps.c.owner.is_(None) if owner is None else scraps.c.owner == owner


def _this(key: str, day: str, generation: int) -> tuple[sa.ColumnElement[bool], ...]:
    return (
        daily_notes.c.owner_key == key,
        daily_notes.c.day == day,
        daily_notes.c.generation == generation,
    )


async def _insert_day(conn: AsyncConnection, key: str, day: str, now: datetime) -> bool:
    """The day's row, generation 1, unless it exists; whether this call made it. A
    savepoint keeps the caller's transaction usable when another instance won."""
    try:
        async with conn.begin_nested():
            await conn.execute(
                daily_notes.insert().values(owner_key=key, day=day, generation=1, planned_at=now)
            )
    except sa_exc.IntegrityError:
        return False
    return True


def _refused_dependencies(error: InvalidRequestError, depends_on: list[str]) -> list[str]:
    """The dependencies a refusal names (``depends_on[i]``), if it names only those."""
    named: list[str] = []
    for violation in error.field_violations:
        found = re.fullmatch(r"depends_on\[([0-9]+)\]", violation.field)
        if found is None or int(found[1]) >= len(depends_on):
            return []
        named.append(depends_on[int(found[1])])
    return named


def _day_view(row: Any, *, has_questions: bool) -> dict[str, Any]:
    if row.til_status == "SKIPPED":
        status = "SKIPPED"
    elif row.til_status in ("FAILED", "CANCELLED"):
        status = row.til_status
    elif row.recall_status in ("FAILED", "CANCELLED"):
        status = row.recall_status
    elif row.recall_status == "COMPLETED" and row.til_status == "COMPLETED":
        status = "COMPLETED"
    else:
        status = "MAKING"
    note = None
    if row.title is not None:
        note = {
            "title": row.title,
            "body": row.body,
            "model": row.model,
            "notedAt": _aware(row.noted_at).isoformat() if row.noted_at else None,
        }
    return {
        "day": row.day,
        "status": status,
        "generation": row.generation,
        "note": note,
        "hasQuestions": has_questions,
        "error": row.til_error or row.recall_error,
        "noteJobId": row.til_job_id,
        "questionsJobId": row.recall_job_id,
        # {"covered": n, "of": m}: the note covers n of the day's m cards (null until
        # the day is planned).
        "cards": (row.plan or {}).get("cards"),
    }
