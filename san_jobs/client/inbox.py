"""A transactional inbox: apply each job change in the same transaction as its cursor.

The outbox's mirror. JobService's change feed (``StreamJobChanges``) sends every change
of a job (into COMPLETED, FAILED, CANCELLED; a retry back to PENDING) with a cursor.
For each one the inbox opens a transaction on the *application's* engine, calls the
handler with that connection and the job, stores the change's cursor in
``san_jobs_inbox`` in the same transaction and commits. A crash anywhere before the
commit rolls both back and the change comes again; after it, neither comes again:
the handler's effect is applied exactly once::

    async def save_card(conn: AsyncConnection, job: Job) -> None:
        await conn.execute(cards.insert().values(job_id=job.id, ...))  # no commit here

    inbox = Inbox(engine, client, "cards", save_card, statuses=[JobStatus.JOB_STATUS_COMPLETED])
    await inbox.start()    # ... await inbox.stop() at shutdown

The handler must not commit or roll back its connection, and should write only
through it (what it does elsewhere, a call to another service, is not undone by a
rollback and may happen twice). A message without a job (a progress mark: nothing
matched the filters since the last message) only stores its cursor.

Several instances of the application may run the same consumer: one consumes at a
time, holding a lease on its ``san_jobs_inbox`` row (``lease`` seconds, renewed every
third of it); the others wait and one takes over within about ``lease`` + 1 seconds
when the holder dies (at once when it stops). Each change's transaction begins with
a fenced ``UPDATE san_jobs_inbox SET cursor = :new ... WHERE consumer = :c AND cursor
= :old AND lease_owner = :me``: an instance that lost its lease (or whose cursor was
moved by :meth:`Inbox.reset`) changes nothing and goes back to waiting. That UPDATE
holds the row's lock (PostgreSQL) or the database's write lock (SQLite) until the
commit, so no instance can take the lease over while a change is in flight; a
renewal that finds the lease lost cancels the change in flight, which rolls back.
Lease times are the instances' clocks (naive UTC, as the outbox's): keep them in
sync within a fraction of ``lease``.

A handler that raises (or runs past ``handler_timeout``) rolls its transaction back
and is called again with backoff and jitter, each failure logged with
``job_id=<id>``; after ``max_failures`` failures the change is parked (a row in
``san_jobs_inbox_parked`` and the cursor moved past it, in one transaction) and the
feed goes on. :meth:`Inbox.parked` lists them, :meth:`Inbox.replay_parked` runs the
handler again on them. JobService unreachable or refusing the inbox's credentials
(``UNAVAILABLE``, ``DEADLINE_EXCEEDED``, ``UNAUTHENTICATED``, ``PERMISSION_DENIED``)
pauses the inbox with growing pauses, ended early when the client's channel connects
again; the feed is then resumed from the stored cursor.

Defence in depth: given ``requested_by`` (the application's own name as JobService
records it on the jobs it makes), the inbox passes only those jobs' changes to the
handler. A change of another caller's job (JobService under ``--auth token`` keeps a
submitter's feed to its own jobs, but a viewer's token, an instance without
authentication or a misconfigured one sends every tenant's) is logged at WARNING
with ``job_id=<id>`` and its ``requested_by``, counted in :meth:`Inbox.health`
(``ignored``), and only its cursor is stored, as a progress mark's.

A cursor older than the changes JobService keeps (``CURSOR_EXPIRED``: the consumer
was away longer than ``--retain-changes``) is never skipped silently: the inbox stops
consuming, logs an ERROR naming the oldest kept cursor, and :meth:`Inbox.health`
says ``halted``; :meth:`Inbox.reset` (by the operator, after repairing what was
missed) sets the cursor to go on from. A cursor JobService refuses as malformed
halts it the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import aclosing
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

import grpc
from google.protobuf.message import DecodeError
from sqlalchemy import MetaData, delete, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from san_jobs.client._async_client import AsyncJobsClient
from san_jobs.client._errors import CursorExpiredError, InvalidRequestError, JobsError
from san_jobs.client._inbox_schema import (
    INBOX_MIGRATION,
    INBOX_PARKED_TABLE_NAME,
    INBOX_TABLE_NAME,
    create_inbox_tables,
    inbox_tables,
)
from san_jobs.client._views import as_message, result
from san_jobs.client.outbox import (
    _PAUSE_CODES,
    _PERMISSION_CODES,
    _aware,
    _backoff,
    _connected_again,
    _error_text,
    _utcnow,
)
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

__all__ = [
    "INBOX_MIGRATION",
    "INBOX_PARKED_TABLE_NAME",
    "INBOX_TABLE_NAME",
    "Handler",
    "Inbox",
    "InboxHealth",
    "ParkedChange",
    "create_inbox_tables",
    "inbox_tables",
]

logger = logging.getLogger(__name__)

Handler = Callable[[AsyncConnection, pb.Job], Awaitable[None]]
"""``async def handler(conn, job)``: apply one change through ``conn`` (in the inbox's
open transaction: do not commit it)."""

InboxState = Literal["stopped", "standby", "consuming", "retrying", "paused", "failing", "halted"]

_tables = inbox_tables(MetaData())
_inbox, _parked = _tables
_i = _inbox.c
_p = _parked.c

_MAX_STANDBY_POLL = 1.0  # seconds between two tries for the lease, at most


@dataclass(frozen=True, slots=True)
class InboxHealth:
    """What one inbox instance is doing, for health checks and metrics.

    ``state``: "stopped" (not started), "standby" (another instance holds the lease),
    "consuming", "retrying" (a handler is failing: ``failures`` so far, ``job_id``),
    "paused" (JobService away), "failing" (the application's database fails),
    "halted" (the cursor expired or was refused: ``oldest_cursor`` is where the kept
    changes begin; see :meth:`Inbox.reset`). ``cursor`` is the last cursor this
    instance stored or read. ``ok`` is False only while halted, failing or paused.
    """

    consumer: str
    instance_id: str
    state: InboxState
    holds_lease: bool
    cursor: str | None
    failures: int
    job_id: str | None
    last_error: str | None
    oldest_cursor: str | None
    last_change_at: datetime | None
    # Changes of another caller's job this instance did not apply (``requested_by``).
    ignored: int = 0

    @property
    def ok(self) -> bool:
        return self.state in ("stopped", "standby", "consuming", "retrying")


@dataclass(frozen=True, slots=True)
class ParkedChange:
    """A change whose handler kept failing, set aside with its last error."""

    id: int
    consumer: str
    cursor: str
    job_id: str
    job: pb.Job
    error: str
    failures: int
    parked_at: datetime


class _Halt(Exception):
    """The feed cannot go on from the stored cursor until the operator decides."""

    def __init__(self, cursor: str, text: str, oldest_cursor: str | None) -> None:
        super().__init__(text)
        self.cursor = cursor
        self.text = text
        self.oldest_cursor = oldest_cursor


class _HandlerFailed(Exception):
    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def _parked_change(row: Any) -> ParkedChange:
    parked_at = _aware(row.parked_at)
    assert parked_at is not None
    try:
        job = pb.Job.FromString(row.job)
    except DecodeError:  # written by something else than the inbox
        job = pb.Job(id=row.job_id)
    return ParkedChange(
        id=int(row.id),
        consumer=row.consumer,
        cursor=row.cursor,
        job_id=row.job_id,
        job=job,
        error=row.error,
        failures=int(row.failures),
        parked_at=parked_at,
    )


class Inbox:
    """The inbox of one consumer (a name, the key of its ``san_jobs_inbox`` row) in
    one application database, fed by JobService's change feed.

    ``job_types``, ``statuses``: only these changes reach the handler (JobService
    filters; the cursor still moves past the others). ``lease``: seconds this
    instance's hold on the consumer lasts without renewal (renewed every third of
    it); another instance takes over within about that long after this one died.
    ``max_failures``: handler failures of one change before it is parked.
    ``max_backoff``: the longest pause between two tries (a failing handler,
    JobService away, the database failing). ``handler_timeout``: seconds a handler
    may run before its call counts as a failure (None: no limit; a hung handler then
    holds the consumer, since its transaction holds the row). ``requested_by``: the
    caller whose jobs this consumer applies (the application's own identity as
    JobService records it); a change of another caller's job is logged and skipped
    (its cursor stored). None (the default): every change the feed sends is applied.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        client: AsyncJobsClient,
        consumer: str,
        handler: Handler,
        *,
        job_types: Iterable[pb.JobType.ValueType] = (),
        statuses: Iterable[pb.JobStatus.ValueType] = (),
        lease: float = 5.0,
        max_failures: int = 5,
        max_backoff: float = 30.0,
        handler_timeout: float | None = 60.0,
        requested_by: str | None = None,
    ) -> None:
        if not consumer or len(consumer) > 128:
            raise ValueError("consumer must be 1 to 128 characters")
        if max_failures < 1:
            raise ValueError("max_failures must be at least 1")
        if lease <= 0:
            raise ValueError("lease must be positive")
        self._engine = engine
        self._client = client
        self.consumer = consumer
        self.handler = handler
        self.job_types = tuple(job_types)
        self.statuses = tuple(statuses)
        self.lease = lease
        self.max_failures = max_failures
        self.max_backoff = max_backoff
        self.handler_timeout = handler_timeout
        self.requested_by = requested_by
        self._ignored = 0
        self.instance_id = f"inbox-{uuid.uuid4().hex[:12]}"
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._state: InboxState = "stopped"
        self._holds_lease = False
        self._cursor: str | None = None
        self._failures = 0
        self._job_id: str | None = None
        self._last_error: str | None = None
        self._halt: _Halt | None = None
        self._last_change_at: datetime | None = None
        self._pause_failures = 0
        self._in_flight = False

    # -- the operator's view and tools ------------------------------------------------

    def health(self) -> InboxHealth:
        """This instance's state now (no database call)."""
        return InboxHealth(
            consumer=self.consumer,
            instance_id=self.instance_id,
            state=self._state,
            holds_lease=self._holds_lease,
            cursor=self._cursor,
            failures=self._failures,
            job_id=self._job_id,
            last_error=self._last_error,
            oldest_cursor=None if self._halt is None else self._halt.oldest_cursor,
            last_change_at=self._last_change_at,
            ignored=self._ignored,
        )

    async def stored_cursor(self) -> str | None:
        """The consumer's cursor as stored (None before the consumer's first start)."""
        async with self._engine.connect() as conn:
            value = await conn.scalar(select(_i.cursor).where(_i.consumer == self.consumer))
        return None if value is None else str(value)

    async def parked(self) -> list[ParkedChange]:
        """The consumer's parked changes, oldest first."""
        async with self._engine.connect() as conn:
            rows = await conn.execute(
                select(_parked).where(_p.consumer == self.consumer).order_by(_p.id)
            )
            return [_parked_change(row) for row in rows]

    async def replay_parked(self, ids: Iterable[int] | None = None) -> list[ParkedChange]:
        """Call the handler again on parked changes (``ids``, or all of the consumer's),
        oldest first, each in a transaction that deletes its parked row: one that
        succeeds is gone, one that fails again stays with its new error and failure
        count. Returns those still parked among the ones tried.

        The change is replayed as it was parked: a later change of the same job may
        have been applied since (compare ``job.update_time`` in the handler if that
        matters). Runs beside the feed, on any instance; two replays of one row apply
        it once.
        """
        wanted = None if ids is None else set(ids)
        still: list[ParkedChange] = []
        for change in await self.parked():
            if wanted is not None and change.id not in wanted:
                continue
            try:
                async with self._engine.begin() as conn:
                    gone = await conn.execute(
                        delete(_parked).where(_p.id == change.id, _p.consumer == self.consumer)
                    )
                    if gone.rowcount != 1:  # replayed meanwhile by another caller
                        continue
                    await self._call_handler(conn, result(change.job))
            except _HandlerFailed as failed:
                text = _error_text(failed.error)
                async with self._engine.begin() as conn:
                    await conn.execute(
                        update(_parked)
                        .where(_p.id == change.id)
                        .values(error=text, failures=_p.failures + 1)
                    )
                logger.warning(
                    "inbox %s: replay of parked change %d failed again, job_id=%s: %s",
                    self.consumer,
                    change.id,
                    change.job_id,
                    text,
                )
                still.append(change)
                continue
            logger.info(
                "inbox %s: parked change %d replayed, job_id=%s",
                self.consumer,
                change.id,
                change.job_id,
            )
        again = {change.id for change in still}
        return [change for change in await self.parked() if change.id in again]

    async def reset(self, cursor: str = "") -> None:
        """Set the consumer's cursor to ``cursor`` ("" = from the oldest change kept)
        and clear a halt: the operator's decision after ``CURSOR_EXPIRED`` (changes
        between the old cursor and the kept ones are lost to this consumer). Every
        instance of the consumer goes on from there, a halted one within ``lease``."""
        now = _utcnow()
        async with self._engine.begin() as conn:
            await self._ensure_row(conn, now)
            await conn.execute(
                update(_inbox)
                .where(_i.consumer == self.consumer)
                .values(cursor=cursor, last_error=None, updated_at=now)
            )
        logger.warning("inbox %s: cursor reset to %r", self.consumer, cursor)
        self._halt = None
        self._last_error = None
        self._cursor = cursor
        self._wake.set()

    # -- running ----------------------------------------------------------------------

    async def start(self) -> None:
        """Start consuming in a task (idempotent)."""
        if self._task is None or self._task.done():
            self._state = "standby"
            self._task = asyncio.create_task(self._run(), name=f"inbox {self.consumer}")

    async def stop(self) -> None:
        """Stop; a change in flight rolls back (it comes again). The lease is released,
        so another instance takes over at once."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        await asyncio.wait([task])
        if not task.cancelled() and task.exception() is not None:
            logger.error("inbox %s had ended on an error", self.consumer, exc_info=task.exception())
        self._state = "stopped"
        self._holds_lease = False
        try:
            async with self._engine.begin() as conn:
                await conn.execute(
                    update(_inbox)
                    .where(_i.consumer == self.consumer, _i.lease_owner == self.instance_id)
                    .values(lease_owner=None, lease_until=None)
                )
        except Exception:  # the lease then simply expires
            logger.warning("inbox %s could not release its lease", self.consumer)

    async def _run(self) -> None:
        database_failures = 0
        while True:
            self._wake.clear()
            try:
                if self._halt is not None:
                    await self._wait_for_reset(self._halt)
                    continue
                cursor = await self._acquire()
                database_failures = 0
                if cursor is None:
                    self._state = "standby"
                    await self._sleep(min(_MAX_STANDBY_POLL, self.lease / 4))
                    continue
                await self._hold(cursor)
            except _Halt as halt:
                await self._halted(halt)
            except Exception as error:
                database_failures += 1
                self._state = "failing"
                self._holds_lease = False
                self._last_error = _error_text(error)
                logger.exception("inbox %s: the database failed", self.consumer)
                await asyncio.sleep(_backoff(database_failures, self.max_backoff))

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)

    async def _ensure_row(self, conn: AsyncConnection, now: datetime) -> None:
        found = await conn.scalar(select(_i.consumer).where(_i.consumer == self.consumer))
        if found is None:
            # A concurrent first start of another instance makes this fail: the
            # caller's transaction is then retried (IntegrityError).
            await conn.execute(
                insert(_inbox).values(consumer=self.consumer, cursor="", updated_at=now)
            )

    async def _acquire(self) -> str | None:
        """Take or renew the lease; the stored cursor if this instance holds it now."""
        now = _utcnow()
        try:
            async with self._engine.begin() as conn:
                await self._ensure_row(conn, now)
                taken = await conn.execute(
                    update(_inbox)
                    .where(
                        _i.consumer == self.consumer,
                        or_(
                            _i.lease_owner.is_(None),
                            _i.lease_owner == self.instance_id,
                            _i.lease_until < now,
                        ),
                    )
                    .values(
                        lease_owner=self.instance_id,
                        lease_until=now + timedelta(seconds=self.lease),
                    )
                )
                if taken.rowcount != 1:
                    self._holds_lease = False
                    return None
                cursor = await conn.scalar(select(_i.cursor).where(_i.consumer == self.consumer))
        except IntegrityError:  # another instance created the row first
            return None
        if not self._holds_lease:
            logger.info("inbox %s: %s holds the lease", self.consumer, self.instance_id)
        self._holds_lease = True
        self._cursor = str(cursor)
        return str(cursor)

    async def _hold(self, cursor: str) -> None:
        """Consume from ``cursor`` while renewing the lease; returns when the lease
        is lost, the fence failed, or the stream broke (the caller takes it again)."""
        if self._state not in ("paused", "retrying"):
            self._state = "consuming"
        consume = asyncio.create_task(self._consume(cursor))
        renew = asyncio.create_task(self._keep_lease())
        try:
            await asyncio.wait([consume, renew], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (consume, renew):
                task.cancel()
            await asyncio.wait([consume, renew])
        if renew.done() and not renew.cancelled() and renew.exception() is None:
            self._holds_lease = False  # lost: the change in flight was cancelled
        error = None if consume.cancelled() else consume.exception()
        if error is not None:
            raise error

    async def _keep_lease(self) -> None:
        """Renew the lease every third of it; return once it is lost."""
        confirmed = time.monotonic()
        while True:
            await asyncio.sleep(self.lease / 3)
            if self._in_flight:
                # The change's transaction holds the row (its fenced UPDATE set the
                # lease): nobody can take it over; renewing would only wait for it.
                confirmed = time.monotonic()
                continue
            now = _utcnow()
            try:
                async with self._engine.begin() as conn:
                    renewed = await conn.execute(
                        update(_inbox)
                        .where(_i.consumer == self.consumer, _i.lease_owner == self.instance_id)
                        .values(lease_until=now + timedelta(seconds=self.lease))
                    )
            except Exception:
                logger.warning("inbox %s: lease renewal failed", self.consumer, exc_info=True)
                if time.monotonic() - confirmed > self.lease:
                    return
                continue
            if renewed.rowcount != 1:
                logger.warning("inbox %s: %s lost its lease", self.consumer, self.instance_id)
                return
            confirmed = time.monotonic()

    async def _consume(self, cursor: str) -> None:
        feed = self._client.stream_job_changes(
            cursor, job_types=self.job_types, statuses=self.statuses
        )
        received = False
        try:
            async with aclosing(feed):
                async for change in feed:
                    received = True
                    self._pause_failures = 0
                    if self._state != "retrying":
                        self._state = "consuming"
                    if change.HasField("job") and self._foreign(change.cursor, change.job):
                        moved = await self._store_mark(cursor, change.cursor)
                    elif change.HasField("job"):
                        moved = await self._deliver(cursor, change.cursor, change.job)
                    else:
                        moved = await self._store_mark(cursor, change.cursor)
                    if not moved:
                        return  # fenced out: lease lost or cursor reset; take it again
                    cursor = change.cursor
        except CursorExpiredError as error:
            oldest = error.oldest_cursor
            raise _Halt(cursor, f"CURSOR_EXPIRED: {error.message}", oldest) from None
        except InvalidRequestError as error:
            raise _Halt(cursor, f"cursor refused: {error.message}", None) from None
        except JobsError as error:
            await self._stream_failed(error)
            return
        # The server ended the stream (going away): resume at once, unless it ended
        # before sending anything (then wait, as for a broken stream).
        if not received:
            self._pause_failures += 1
            await asyncio.sleep(_backoff(self._pause_failures, self.max_backoff))

    def _foreign(self, cursor: str, job: pb.Job) -> bool:
        """True (and logged) when the change is of a job another caller made than
        the one this consumer applies."""
        if self.requested_by is None or job.requested_by == self.requested_by:
            return False
        self._ignored += 1
        logger.warning(
            "inbox %s: change of another caller's job ignored, job_id=%s requested_by=%r "
            "(expected %r; cursor %s, %d ignored so far)",
            self.consumer,
            job.id,
            job.requested_by,
            self.requested_by,
            cursor,
            self._ignored,
        )
        return True

    async def _stream_failed(self, error: JobsError) -> None:
        text = _error_text(error)
        self._pause_failures += 1
        self._last_error = text
        pause = _backoff(self._pause_failures, self.max_backoff)
        if error.code in _PAUSE_CODES:
            self._state = "paused"
            log = logger.error if error.code in _PERMISSION_CODES else logger.warning
            log("inbox %s: JobService away, paused %.2fs: %s", self.consumer, pause, text)
            await self._sleep_while_away(pause)
        else:
            logger.warning("inbox %s: feed broke, again in %.2fs: %s", self.consumer, pause, text)
            await asyncio.sleep(pause)

    async def _sleep_while_away(self, pause: float) -> None:
        """Sleep ``pause`` seconds, or until the client's channel connects again."""
        channel = getattr(self._client, "_channel", None)
        if not isinstance(channel, grpc.aio.Channel):
            await asyncio.sleep(pause)
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(pause):
                try:
                    await _connected_again(channel)
                except Exception:
                    await asyncio.sleep(pause)

    # -- one change -------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _fenced(self, old: str, new: str) -> AsyncIterator[AsyncConnection | None]:
        """A transaction that has moved the cursor from ``old`` to ``new`` if this
        instance holds the lease (else None); commits on leaving without error."""
        now = _utcnow()
        started = time.monotonic()
        async with self._engine.connect() as conn:
            transaction = await conn.begin()
            self._in_flight = True
            try:
                moved = await conn.execute(
                    update(_inbox)
                    .where(
                        _i.consumer == self.consumer,
                        _i.cursor == old,
                        _i.lease_owner == self.instance_id,
                    )
                    .values(
                        cursor=new,
                        lease_until=now + timedelta(seconds=self.lease),
                        updated_at=now,
                        last_error=None,
                    )
                )
                if moved.rowcount != 1:
                    await transaction.rollback()
                    logger.warning(
                        "inbox %s: %s no longer holds the lease at cursor %r: not applied",
                        self.consumer,
                        self.instance_id,
                        old,
                    )
                    yield None
                    return
                yield conn
                if time.monotonic() - started > self.lease / 3:  # a long handler
                    await conn.execute(
                        update(_inbox)
                        .where(_i.consumer == self.consumer)
                        .values(lease_until=_utcnow() + timedelta(seconds=self.lease))
                    )
                await transaction.commit()
            except BaseException:
                if transaction.is_active:
                    await transaction.rollback()
                raise
            finally:
                self._in_flight = False

    async def _call_handler(self, conn: AsyncConnection, job: pb.Job) -> None:
        scope = asyncio.timeout(self.handler_timeout)
        try:
            async with scope:
                await self.handler(conn, job)
        except TimeoutError as error:
            failure: Exception = error
            if scope.expired():
                failure = TimeoutError(f"the handler ran over {self.handler_timeout}s")
            raise _HandlerFailed(failure) from error
        except Exception as error:
            raise _HandlerFailed(error) from error

    async def _store_mark(self, old: str, new: str) -> bool:
        async with self._fenced(old, new) as conn:
            if conn is None:
                return False
        self._committed(new, None)
        return True

    async def _deliver(self, old: str, new: str, job: pb.Job) -> bool:
        """Apply one change, retrying a failing handler; park it after max_failures.
        False when this instance is fenced out."""
        failures = 0
        while True:
            try:
                async with self._fenced(old, new) as conn:
                    if conn is None:
                        return False
                    await self._call_handler(conn, job)
            except _HandlerFailed as failed:
                failures += 1
                text = _error_text(failed.error)
                self._failures, self._job_id, self._last_error = failures, job.id, text
                if failures >= self.max_failures:
                    return await self._park(old, new, job, text, failures)
                self._state = "retrying"
                delay = _backoff(failures, self.max_backoff)
                logger.warning(
                    "inbox %s: handler failed for job_id=%s (cursor %s, failure %d of %d), "
                    "again in %.2fs: %s",
                    self.consumer,
                    job.id,
                    new,
                    failures,
                    self.max_failures,
                    delay,
                    text,
                )
                await asyncio.sleep(delay)
                continue
            self._committed(new, job)
            return True

    async def _park(self, old: str, new: str, job: pb.Job, error: str, failures: int) -> bool:
        async with self._fenced(old, new) as conn:
            if conn is None:
                return False
            await conn.execute(
                insert(_parked).values(
                    consumer=self.consumer,
                    cursor=new,
                    job_id=job.id,
                    job=as_message(job).SerializeToString(),
                    error=error,
                    failures=failures,
                    parked_at=_utcnow(),
                )
            )
        logger.error(
            "inbox %s: change parked after %d failures, job_id=%s (cursor %s): %s",
            self.consumer,
            failures,
            job.id,
            new,
            error,
        )
        self._committed(new, job)
        return True

    def _committed(self, cursor: str, job: pb.Job | None) -> None:
        """After a change's (or mark's) commit: what this instance remembers."""
        self._cursor = cursor
        if job is not None:
            self._last_change_at = _utcnow()
            self._failures, self._job_id = 0, None
            self._last_error = None
        self._state = "consuming"

    # -- halted -----------------------------------------------------------------------

    async def _halted(self, halt: _Halt) -> None:
        self._halt = halt
        self._state = "halted"
        self._last_error = halt.text
        shown = "" if halt.oldest_cursor is None else f"; the oldest kept is {halt.oldest_cursor!r}"
        logger.error(
            "inbox %s halted at cursor %r, no change skipped: %s%s; "
            "call Inbox.reset(cursor) to go on",
            self.consumer,
            halt.cursor,
            halt.text,
            shown,
        )
        try:
            async with self._engine.begin() as conn:
                await conn.execute(
                    update(_inbox)
                    .where(_i.consumer == self.consumer, _i.lease_owner == self.instance_id)
                    .values(last_error=halt.text + shown, lease_owner=None, lease_until=None)
                )
        except Exception:
            logger.warning("inbox %s could not record its halt", self.consumer, exc_info=True)
        self._holds_lease = False

    async def _wait_for_reset(self, halt: _Halt) -> None:
        """Wait until :meth:`reset` here, or a new cursor stored by another instance."""
        await self._sleep(self.lease)
        if self._halt is None:
            return
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(
                    select(_i.cursor, _i.last_error).where(_i.consumer == self.consumer)
                )
            ).first()
        if row is not None and (row.cursor != halt.cursor or row.last_error is None):
            logger.warning("inbox %s: reset elsewhere, going on", self.consumer)
            self._halt = None
            self._last_error = None
