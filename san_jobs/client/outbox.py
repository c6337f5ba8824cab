"""A transactional outbox: enqueue a job in the same transaction as the business row.

The application writes its row and :meth:`Outbox.add` writes the job request to
``san_jobs_outbox`` in the same transaction: both commit or neither does. A relay (an
asyncio task, :meth:`Outbox.start`/:meth:`Outbox.stop`) then sends each committed row
to JobService with ``request_id`` = the row id, so a delivery repeated after a lost
answer (a timeout, a crash) returns the same job, never a second one::

    outbox = Outbox(engine, client)
    await outbox.start()
    async with engine.begin() as conn:
        await conn.execute(scraps.insert().values(id=scrap_id, ...))
        row_id = await outbox.add(conn, enqueue_request(scrap_id, CardAnalysisInput(...)))
    # committed: the relay is woken now and delivers it
    entry = await outbox.entry(row_id)   # state "queued" | "delivered" | "refused"

Delivery: per target (job_type, target_id) in the order rows were added, only the
oldest queued row of a target in flight. JobService unreachable (``UNAVAILABLE``,
``DEADLINE_EXCEEDED``) or refusing the relay's credentials (``UNAUTHENTICATED``,
``PERMISSION_DENIED``: a deploy or token rotation, not the row's fault) pauses the
whole relay with backoff and jitter, probing with one row, and the pause ends early
when the client's channel connects again (JobService is back: the relay notices
within the channel's reconnect backoff, about 2 s, not its own); other transient codes
(``RESOURCE_EXHAUSTED``, ``ABORTED``, ``INTERNAL``, ``UNKNOWN``, ...) retry that row
with backoff (never sooner than a ``RetryInfo``). A permanent refusal
(``INVALID_ARGUMENT``, ``ALREADY_EXISTS`` without RETURN_EXISTING, ``NOT_FOUND``,
``FAILED_PRECONDITION``, ``OUT_OF_RANGE``, ``UNIMPLEMENTED``) is stored on the row as
"refused" with the error and never sent again.

Several relays may share one PostgreSQL database: a row is claimed with ``FOR UPDATE
SKIP LOCKED`` in a short transaction that sets a lease, and the network call happens
after that commit, with no transaction open. With SQLite, run one relay per database
file (SQLite has no row locks; the lease still stops one relay sending a row twice).
A relay killed (-9) during a call leaves its row leased. When a relay's probe is
answered after an outage, it takes over the rows other relays leased before that
outage began (sent again, a row's request_id returns the same job) instead of
waiting for their leases to end: a restarted san-web's relay thus sends the row its
killed predecessor was probing with as soon as JobService is back (issue 42, point 8).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import random
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import grpc
from google.protobuf.message import DecodeError
from sqlalchemy import MetaData, and_, delete, event, exists, func, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
from sqlalchemy.orm import Session, aliased

from san_jobs.client._async_client import AsyncJobsClient
from san_jobs.client._errors import JobsError, RateLimitedError
from san_jobs.client._outbox_schema import (
    DELIVERED,
    OUTBOX_MIGRATION,
    OUTBOX_TABLE_NAME,
    QUEUED,
    REFUSED,
    create_outbox_table,
    outbox_table,
)
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

__all__ = [
    "OUTBOX_MIGRATION",
    "OUTBOX_TABLE_NAME",
    "Outbox",
    "OutboxEntry",
    "create_outbox_table",
    "outbox_table",
]

logger = logging.getLogger(__name__)

OutboxState = Literal["queued", "delivered", "refused"]

_table = outbox_table(MetaData())
_c = _table.c

# Codes that say "JobService (or our way to it) is not usable now", not "this row is
# bad": the whole relay pauses and probes with one row. UNAUTHENTICATED and
# PERMISSION_DENIED are here because they are about the relay's token, the same for
# every row; refusing rows for them would lose every job queued during a rotation.
_PAUSE_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
    }
)
_PERMISSION_CODES = frozenset({grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED})
# Codes that say the request itself will never be accepted: recorded, not retried.
_PERMANENT_CODES = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)

_BASE_BACKOFF = 0.05  # seconds before the first retry; doubles up to max_backoff
_MAX_ERROR_CHARS = 1000
_UNCOMMITTED_GRACE = 5.0  # seconds a woken-for row may take to become visible
_CATCH_UP_PAUSE = 0.01  # seconds between looks for a row whose commit is still landing
_PRUNE_EVERY = 60.0  # seconds between two prunes, at most


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """One outbox row as the application sees it.

    ``job_id`` is set once delivered; ``error`` holds the refusal (state "refused") or,
    while "queued", the last transient failure. ``attempts`` counts delivery attempts.
    """

    id: str
    state: OutboxState
    job_id: str | None
    error: str | None
    attempts: int
    created_at: datetime
    delivered_at: datetime | None


OnDelivered = Callable[[OutboxEntry], Awaitable[None] | None]


@dataclass(frozen=True, slots=True)
class _Claimed:
    id: str
    request: bytes
    attempts: int


def _utcnow() -> datetime:
    """Naive UTC, the form stored in the table (see _outbox_schema)."""
    return datetime.now(UTC).replace(tzinfo=None)


def _aware(value: datetime | None) -> datetime | None:
    return None if value is None else value.replace(tzinfo=UTC)


def _backoff(failures: int, cap: float) -> float:
    """Exponential backoff with jitter: a random delay in [d/2, d], d = base * 2^(n-1)."""
    delay = min(cap, _BASE_BACKOFF * 2 ** max(0, min(failures - 1, 30)))
    return random.uniform(delay / 2, delay)


async def _connected_again(channel: grpc.aio.Channel) -> None:
    """Return when ``channel`` turns READY: a change of state, not READY already (a
    JobService that answers UNAVAILABLE on a live connection, its database away,
    must not wake the relay in a loop). Asking an idle channel to connect costs one
    attempt per reconnect backoff at most, as a probe would. A closed channel never
    connects: this then waits until cancelled (the caller's pause ends it)."""
    state = channel.get_state(try_to_connect=True)
    while state is not grpc.ChannelConnectivity.SHUTDOWN:
        await channel.wait_for_state_change(state)
        state = channel.get_state(try_to_connect=True)
        if state is grpc.ChannelConnectivity.READY:
            return
    await asyncio.get_running_loop().create_future()


def _error_text(error: BaseException) -> str:
    if isinstance(error, JobsError):
        text = f"{error.code.name}: {error.message}"
        existing = error.metadata.get("existingJobId")
        if existing:
            text += f" (existing job {existing})"
    else:
        text = f"{type(error).__name__}: {error}"
    if len(text) > _MAX_ERROR_CHARS:
        text = text[:_MAX_ERROR_CHARS] + "..."
    return text


def _entry(row: Any) -> OutboxEntry:
    created = _aware(row.created_at)
    assert created is not None
    return OutboxEntry(
        id=row.id,
        state=row.state,
        job_id=row.job_id,
        error=row.error,
        attempts=row.attempts,
        created_at=created,
        delivered_at=_aware(row.settled_at) if row.state == DELIVERED else None,
    )


class Outbox:
    """The outbox of one application database and its relay to JobService.

    ``retention``: seconds a delivered or refused row is kept before pruning.
    ``poll_interval``: the fallback look for due rows when nothing woke the relay.
    ``max_backoff``: the longest pause between two attempts. ``lease``: seconds a
    claimed row is reserved for its relay (a relay that dies releases its rows when
    the lease ends); each call's deadline is at most half of it. ``batch_size``: rows
    claimed, and sent concurrently, at once. ``on_delivered``: called (sync or async)
    with each row the relay delivered.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        client: AsyncJobsClient,
        *,
        retention: float = 7 * 86400,
        poll_interval: float = 1.0,
        max_backoff: float = 30.0,
        lease: float = 30.0,
        batch_size: int = 100,
        on_delivered: OnDelivered | None = None,
    ) -> None:
        self._engine = engine
        self._client = client
        self.retention = retention
        self.poll_interval = poll_interval
        self.max_backoff = max_backoff
        self.lease = lease
        self.batch_size = batch_size
        self.on_delivered = on_delivered
        self.relay_id = f"relay-{uuid.uuid4().hex[:12]}"
        self._postgres = engine.dialect.name == "postgresql"
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._pause_failures = 0  # consecutive relay-wide failures (JobService away)
        # When the claim that first found JobService away was made (naive UTC).
        self._outage_from: datetime | None = None
        # Set when a probe is answered after an outage: other relays' leases ending at
        # or before this (naive UTC) were taken before the outage began, and are taken
        # over rather than waited for (see _pass and _claim).
        self._take_over_until: datetime | None = None
        self._last_prune = float("-inf")
        # Rows committed (per the hook) that the relay has not seen yet: id -> give-up time.
        self._awaited: dict[str, float] = {}
        # Ids added in each open transaction, by the sync Session or Connection.
        self._pending: weakref.WeakKeyDictionary[Session | Connection, list[str]] = (
            weakref.WeakKeyDictionary()
        )
        self._hooked: weakref.WeakSet[Session | Connection] = weakref.WeakSet()

    # -- writing, in the caller's transaction ---------------------------------------

    async def add(
        self, conn_or_session: AsyncConnection | AsyncSession, request: pb.EnqueueRequest
    ) -> str:
        """Insert ``request`` into the outbox inside the caller's open transaction.

        Returns the row id, which becomes the request's ``request_id`` (any id set on
        ``request`` is replaced). Nothing is sent before the transaction commits; a
        rollback removes the row with the caller's own. The relay is woken by the
        commit itself.
        """
        row_id = str(uuid.uuid4())
        message = pb.EnqueueRequest()
        message.CopyFrom(request)
        message.request_id = row_id
        values = {
            "id": row_id,
            "job_type": pb.JobType.Name(message.job_type),
            "target_id": message.target_id,
            "request": message.SerializeToString(),
            "state": QUEUED,
            "attempts": 0,
            "created_at": _utcnow(),
        }
        await conn_or_session.execute(_table.insert().values(**values))
        self._hook(conn_or_session, row_id)
        return row_id

    def _hook(self, conn_or_session: AsyncConnection | AsyncSession, row_id: str) -> None:
        """Remember ``row_id`` until its transaction ends; wake the relay on commit."""
        owner: Session | Connection
        if isinstance(conn_or_session, AsyncSession):
            owner = conn_or_session.sync_session
            commit_event, rollback_event = "after_commit", "after_rollback"
        else:
            sync_connection = conn_or_session.sync_connection
            if sync_connection is None:  # pragma: no cover - execute() above would have failed
                return
            owner = sync_connection
            # A Connection's "commit" event fires as COMMIT is sent, not after it
            # lands; the relay therefore keeps looking for these ids a little while
            # (see _catch_up), instead of going back to sleep on an empty claim.
            commit_event, rollback_event = "commit", "rollback"
        self._pending.setdefault(owner, []).append(row_id)
        if owner not in self._hooked:
            self._hooked.add(owner)
            event.listen(owner, commit_event, self._on_commit)
            event.listen(owner, rollback_event, self._on_rollback)

    def _on_commit(self, owner: Session | Connection) -> None:
        ids = self._pending.pop(owner, [])
        if ids and self._task is not None:
            give_up = time.monotonic() + _UNCOMMITTED_GRACE
            for row_id in ids:
                self._awaited[row_id] = give_up
            self._wake.set()

    def _on_rollback(self, owner: Session | Connection, *_: object) -> None:
        self._pending.pop(owner, None)

    # -- reading ----------------------------------------------------------------------

    async def entry(self, row_id: str) -> OutboxEntry | None:
        """The row ``row_id`` (None once pruned, or if it never committed)."""
        return (await self.entries([row_id])).get(row_id)

    async def entries(self, ids: Iterable[str]) -> dict[str, OutboxEntry]:
        """The rows among ``ids`` that exist, by id."""
        wanted = list(dict.fromkeys(ids))
        found: dict[str, OutboxEntry] = {}
        async with self._engine.connect() as conn:
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                result = await conn.execute(select(_table).where(_c.id.in_(chunk)))
                for row in result:
                    found[row.id] = _entry(row)
        return found

    # -- the relay --------------------------------------------------------------------

    async def start(self) -> None:
        """Start the relay task (idempotent)."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=f"outbox {self.relay_id}")

    async def stop(self) -> None:
        """Stop the relay; rows it had claimed are released for the next relay at once.

        A call in flight is abandoned: JobService may have stored that job, and the
        next delivery (same request_id) returns it rather than a second one.
        """
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        self._awaited.clear()
        try:
            async with self._engine.begin() as conn:
                await conn.execute(
                    update(_table)
                    .where(_c.lease_owner == self.relay_id, _c.state == QUEUED)
                    .values(lease_owner=None, lease_until=None)
                )
        except Exception:  # the leases then simply expire
            logger.warning("outbox relay %s could not release its leases", self.relay_id)

    def wake(self) -> None:
        """Ask the relay to look for due rows now (a commit does this by itself)."""
        self._wake.set()

    async def _run(self) -> None:
        database_failures = 0
        while True:
            self._wake.clear()  # a wake during the pass makes the next sleep return at once
            away = False
            try:
                pause, wakeable = await self._pass()
                database_failures = 0
                away = not wakeable  # the pass paused the relay: JobService is away
            except Exception:
                database_failures += 1
                pause, wakeable = _backoff(database_failures, self.max_backoff), False
                logger.exception("outbox relay %s: the database failed", self.relay_id)
            if pause <= 0:
                continue
            if away:
                await self._sleep_while_away(pause)
                continue
            if not wakeable:
                await asyncio.sleep(pause)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), pause)

    async def _sleep_while_away(self, pause: float) -> None:
        """Sleep ``pause`` seconds, or until the client's channel connects again.

        The pause grows while JobService stays away (one probe row per pause), but
        its return is seen by the channel first: woken then, the relay delivers
        within the channel's reconnect backoff of JobService's return."""
        channel = getattr(self._client, "_channel", None)  # our own client's channel
        if not isinstance(channel, grpc.aio.Channel):  # a client of another make
            await asyncio.sleep(pause)
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(pause):
                try:
                    await _connected_again(channel)
                except Exception:  # the channel was closed meanwhile: the pause alone
                    await asyncio.sleep(pause)

    async def _pass(self) -> tuple[float, bool]:
        """One round: prune if due, claim and deliver. Returns (pause, wakeable)."""
        if time.monotonic() - self._last_prune >= min(_PRUNE_EVERY, self.retention):
            await self.prune()
        probing = self._pause_failures > 0
        claimed_at = _utcnow()
        claimed = await self._claim(1 if probing else self.batch_size)
        if claimed:
            results = await asyncio.gather(
                *(self._deliver(row) for row in claimed), return_exceptions=True
            )
            for result in results:
                if isinstance(result, BaseException):
                    raise result  # a database failure: the rows come back when leases end
            outcomes = [bool(result) for result in results]
            if any(outcomes):  # JobService is away: pause the whole relay
                if self._pause_failures == 0:
                    self._outage_from = claimed_at
                self._pause_failures += 1
                return _backoff(self._pause_failures, self.max_backoff), False
            if probing and self._outage_from is not None:
                # JobService answers again. A row another relay still holds from
                # before this outage began is held by a relay killed in the call (kill
                # -9 keeps the lease, twice a call's deadline) or by a call that met
                # the outage too: take it over now rather than wait up to a lease.
                # Sent twice, a row's request_id returns the same job, and only the
                # lease holder settles it. With the same lease as ours, such a lease
                # ends by _outage_from + lease; rows leased later are left to their
                # relay (a peer's ordinary calls are not sent twice).
                self._take_over_until = self._outage_from + timedelta(seconds=self.lease)
            self._outage_from = None
            self._pause_failures = 0
            return 0.0, True
        if self._awaited and await self._catch_up():
            return _CATCH_UP_PAUSE, True
        return self.poll_interval, True

    async def _catch_up(self) -> bool:
        """True while a row announced by a commit hook is not visible yet."""
        now = time.monotonic()
        for row_id, give_up in list(self._awaited.items()):
            if give_up < now:
                del self._awaited[row_id]
        if not self._awaited:
            return False
        async with self._engine.connect() as conn:
            seen = set(
                (await conn.execute(select(_c.id).where(_c.id.in_(list(self._awaited)))))
                .scalars()
                .all()
            )
        for row_id in seen:
            self._awaited.pop(row_id, None)
        return bool(self._awaited)

    async def _claim(self, limit: int) -> list[_Claimed]:
        """Lease up to ``limit`` due rows, each the oldest queued row of its target.

        One short transaction: SELECT ... FOR UPDATE SKIP LOCKED (PostgreSQL), then an
        UPDATE that sets the lease; committed before any network call.
        """
        now = _utcnow()
        free = or_(_c.lease_until.is_(None), _c.lease_until < now)
        if self._take_over_until is not None and self._take_over_until < now:
            self._take_over_until = None  # every lease it covered has ended by itself
        if self._take_over_until is not None:
            free = or_(
                free,
                and_(_c.lease_owner != self.relay_id, _c.lease_until <= self._take_over_until),
            )
        earlier = aliased(_table)
        older_queued = exists().where(
            earlier.c.state == QUEUED,
            earlier.c.job_type == _c.job_type,
            earlier.c.target_id == _c.target_id,
            earlier.c.seq < _c.seq,
        )
        due = (
            select(_c.id, _c.request, _c.attempts, _c.lease_owner, _c.lease_until)
            .where(
                _c.state == QUEUED,
                or_(_c.next_attempt_at.is_(None), _c.next_attempt_at <= now),
                free,
                ~older_queued,
            )
            .order_by(_c.seq)
            .limit(limit)
        )
        if self._postgres:
            due = due.with_for_update(skip_locked=True, of=_table)
        async with self._engine.begin() as conn:
            rows = (await conn.execute(due)).all()
            if not rows:
                return []
            ids = [row.id for row in rows]
            await conn.execute(
                update(_table)
                .where(_c.id.in_(ids))
                .values(
                    lease_owner=self.relay_id,
                    lease_until=now + timedelta(seconds=self.lease),
                    attempts=_c.attempts + 1,
                )
            )
        for row_id in ids:
            self._awaited.pop(row_id, None)
        for row in rows:
            if row.lease_until is not None and row.lease_until >= now:
                logger.warning(
                    "outbox row %s taken over from relay %s, whose lease (until %s UTC) "
                    "began before JobService went away",
                    row.id,
                    row.lease_owner,
                    row.lease_until.isoformat(timespec="seconds"),
                )
        return [_Claimed(row.id, row.request, row.attempts + 1) for row in rows]

    async def _deliver(self, row: _Claimed) -> bool:
        """Send one claimed row and record the outcome; True if JobService is away."""
        try:
            request = pb.EnqueueRequest.FromString(row.request)
        except DecodeError as error:  # written by something else than add(): never sendable
            await self._settle(row, REFUSED, error=_error_text(error))
            logger.error("outbox row %s refused: its request cannot be read", row.id)
            return False
        try:
            response = await self._send(request)
        except Exception as error:
            return await self._failed(row, error)
        job = response.job
        settled = await self._settle(row, DELIVERED, job_id=job.id)
        logger.info(
            "outbox row %s delivered: job %s%s (attempt %d)",
            row.id,
            job.id,
            " (existing)" if response.deduplicated else "",
            row.attempts,
        )
        if settled is not None and self.on_delivered is not None:
            try:
                result = self.on_delivered(settled)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                logger.exception("outbox on_delivered failed for row %s (job %s)", row.id, job.id)
        return False

    async def _send(self, request: pb.EnqueueRequest) -> pb.EnqueueResponse:
        job_input = getattr(request, request.WhichOneof("input") or "card_analysis_input")
        return await self._client.enqueue(
            request.target_id,
            job_input,
            job_type=request.job_type,
            requested_by=request.requested_by,
            request_id=request.request_id,
            max_attempts=request.max_attempts,
            return_existing=request.on_duplicate == pb.ON_DUPLICATE_RETURN_EXISTING,
            schedule_time=(
                request.schedule_time.ToDatetime(tzinfo=UTC)
                if request.HasField("schedule_time")
                else None
            ),
            priority=request.priority,
            timeout=min(self._client.settings.timeout, self.lease / 2),
        )

    async def _failed(self, row: _Claimed, error: Exception) -> bool:
        text = _error_text(error)
        code = error.code if isinstance(error, JobsError) else None
        if code in _PERMANENT_CODES:
            await self._settle(row, REFUSED, error=text)
            logger.warning("outbox row %s refused, not retried: %s", row.id, text)
            return False
        if code in _PAUSE_CODES:
            # Not the row's fault: released for the next probe, not pushed back.
            await self._release(row, text, next_attempt_at=None)
            log = logger.error if code in _PERMISSION_CODES else logger.warning
            log("outbox row %s not delivered, JobService away: %s", row.id, text)
            return True
        delay = _backoff(row.attempts, self.max_backoff)
        if isinstance(error, RateLimitedError) and error.retry_delay:
            delay = max(delay, error.retry_delay)
        await self._release(row, text, next_attempt_at=_utcnow() + timedelta(seconds=delay))
        logger.warning("outbox row %s retried in %.2fs: %s", row.id, delay, text)
        return False

    def _owned(self, row: _Claimed) -> Any:
        # Only the lease holder records an outcome: a relay whose lease ran out must
        # not overwrite what the next one did.
        return and_(_c.id == row.id, _c.lease_owner == self.relay_id, _c.state == QUEUED)

    async def _settle(
        self, row: _Claimed, state: str, *, job_id: str | None = None, error: str | None = None
    ) -> OutboxEntry | None:
        async with self._engine.begin() as conn:
            result = await conn.execute(
                update(_table)
                .where(self._owned(row))
                .values(
                    state=state,
                    job_id=job_id,
                    error=error,
                    settled_at=_utcnow(),
                    lease_owner=None,
                    lease_until=None,
                    next_attempt_at=None,
                )
            )
            if result.rowcount == 0:
                return None
            stored = (await conn.execute(select(_table).where(_c.id == row.id))).one()
        return _entry(stored)

    async def _release(
        self, row: _Claimed, error: str, *, next_attempt_at: datetime | None
    ) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                update(_table)
                .where(self._owned(row))
                .values(
                    error=error,
                    lease_owner=None,
                    lease_until=None,
                    next_attempt_at=next_attempt_at,
                )
            )

    async def prune(self) -> int:
        """Delete delivered and refused rows settled more than ``retention`` seconds ago;
        returns how many. The relay runs this by itself (at most once a minute)."""
        self._last_prune = time.monotonic()
        cutoff = _utcnow() - timedelta(seconds=self.retention)
        async with self._engine.begin() as conn:
            result = await conn.execute(
                delete(_table).where(_c.state != QUEUED, _c.settled_at < cutoff)
            )
        if result.rowcount:
            logger.info("outbox pruned %d settled rows", result.rowcount)
        return int(result.rowcount or 0)

    async def queued_count(self) -> int:
        """How many rows wait for delivery (for health checks and metrics)."""
        async with self._engine.connect() as conn:
            count = await conn.scalar(
                select(func.count()).select_from(_table).where(_c.state == QUEUED)
            )
        return int(count or 0)
