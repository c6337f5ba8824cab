"""The JobService client, written once: :class:`AsyncJobsClient` (asyncio, grpc.aio).

:class:`~san_jobs.client.JobsClient` runs these same methods on an event loop of its
own, so the requests, the error mapping, the deadlines and the watch's fallback to
polling exist here only.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import aclosing
from datetime import datetime, timedelta
from types import TracebackType
from typing import Self, TypeVar, cast

import grpc

from san_jobs.client import _batch, _requests
from san_jobs.client._channel import ChannelSettings, ClientBase, aio_channel
from san_jobs.client._errors import (
    InvalidRequestError,
    JobNotFoundError,
    JobsError,
    ServiceUnavailableError,
    error_from_rpc,
)
from san_jobs.client._views import result
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc

T = TypeVar("T")

POLL_INTERVAL = 0.5
"""Seconds between GetJob polls once StreamJobUpdates has broken."""
MAX_POLL_FAILURES = 10
"""Consecutive failed polls after which wait()/watch() give up (without a timeout)."""


class AsyncJobsClient(ClientBase[grpc.aio.Channel]):
    """An asyncio client of JobService; :class:`~san_jobs.client.JobsClient` is the
    same client, blocking.

    Every method raises a :class:`~san_jobs.client.JobsError` subclass on failure.
    Unary calls get ``timeout`` seconds unless told otherwise. Create it inside the
    running event loop; ``async with`` closes it, or call :meth:`close`.

    Results are the contract's messages, their enum fields as enums that print their
    names (``job.status`` is ``JobStatus.JOB_STATUS_COMPLETED``, which equals
    ``pb.JOB_STATUS_COMPLETED``, 3); see :func:`~san_jobs.client.as_message`.
    """

    _channel: grpc.aio.Channel | None
    _stub: pb_grpc.JobServiceAsyncStub
    _metadata: tuple[tuple[str, str], ...]
    _on_close: Callable[[], object] | None

    def _connect(self, channel: grpc.aio.Channel | None) -> None:
        channel = channel or aio_channel(self.settings)
        self._use(pb_grpc.JobServiceStub(channel), channel, None)

    @classmethod
    def _over(
        cls,
        settings: ChannelSettings,
        stub: object,
        *,
        channel: grpc.aio.Channel | None = None,
        on_close: Callable[[], object] | None = None,
    ) -> AsyncJobsClient:
        """A client calling ``stub`` (see ``_transport``): JobsClient's inner client,
        or one over the testing fake. ``on_close`` runs when it is closed."""
        client = cls.__new__(cls)
        client.settings = settings
        client._use(stub, channel, on_close)
        return client

    def _use(
        self, stub: object, channel: grpc.aio.Channel | None, on_close: Callable[[], object] | None
    ) -> None:
        self._stub = cast("pb_grpc.JobServiceAsyncStub", stub)
        self._channel = channel
        self._metadata = self.settings.call_metadata()
        self._on_close = on_close

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the channel; calls in flight are cancelled."""
        if self._channel is not None:
            await self._channel.close(None)
        if self._on_close is not None:
            self._on_close()

    async def _call(
        self, method: Callable[..., Awaitable[T]], request: object, timeout: float | None
    ) -> T:
        try:
            return await method(
                request,
                timeout=self.settings.timeout if timeout is None else timeout,
                metadata=self._metadata,
            )
        except grpc.RpcError as error:
            raise error_from_rpc(error) from None

    async def enqueue(
        self,
        target_id: str,
        job_input: _requests.JobInput,
        *,
        job_type: pb.JobType.ValueType | None = None,
        requested_by: str = "",
        request_id: str | None = None,
        max_attempts: int = 0,
        return_existing: bool = False,
        schedule_time: datetime | None = None,
        priority: int = 0,
        depends_on: Sequence[str] = (),
        timeout: float | None = None,
    ) -> pb.EnqueueResponse:
        """Store a job as PENDING; its type follows from ``job_input`` unless given.

        A ``request_id`` makes the call idempotent (a fresh one is generated otherwise).
        With ``return_existing``, an active job for the same (type, target) is returned
        with ``deduplicated = True`` instead of raising :class:`DuplicateJobError`.
        With ``schedule_time`` (aware; naive is taken as UTC) the job is not started
        before then: a delayed job, at most a year ahead (a past time means now).
        ``priority``: 1 (most urgent) to 5 (least), 0 for the default 3; among due jobs
        the more urgent is started first (README, "Priorities").
        ``depends_on``: ids of the caller's jobs this one runs after (at most 100); it
        waits until all are COMPLETED, takes their results where its type does (a
        TIL its cards' summaries, a recall its cards' and TIL's results), and is
        CANCELLED if one fails (README, "Dependencies").
        """
        request = _requests.enqueue_request(
            target_id,
            job_input,
            job_type=job_type,
            requested_by=requested_by,
            request_id=request_id,
            max_attempts=max_attempts,
            return_existing=return_existing,
            schedule_time=schedule_time,
            priority=priority,
            depends_on=depends_on,
        )
        return result(await self._call(self._stub.Enqueue, request, timeout))

    async def enqueue_many(
        self,
        requests: Iterable[pb.EnqueueRequest],
        *,
        batch_size: int = _batch.DEFAULT_BATCH_SIZE,
        max_batch_bytes: int = _batch.DEFAULT_MAX_BATCH_BYTES,
        timeout: float | None = None,
        on_chunk: _batch.ChunkCallback | None = None,
    ) -> list[_batch.EnqueueOutcome]:
        """Store many jobs with BatchEnqueue: one :class:`EnqueueOutcome` per request,
        in order. One bad request never fails the others.

        Requests go ``batch_size`` (1 to 1,000) at a time, or fewer when they hold
        more than ``max_batch_bytes``; ``timeout`` is per call. As :meth:`enqueue`
        does, a request without request_id gets one and an unspecified job_type is
        its input's (the caller's messages are not changed). ``on_chunk(start,
        outcomes)`` hears each answered call, in order (an awaitable it returns is
        awaited). A call JobService refuses because its answer could outgrow the
        server's message limit is sent again as two smaller ones, down to single
        requests. A call failing as a whole (JobService unreachable after the
        channel's retries, ...) raises its :class:`JobsError`: the calls before it
        are stored (``on_chunk`` has seen them); sending the rest again is safe for
        requests with their own request_id.
        """
        _batch.check_batch_size(batch_size)
        results: list[_batch.EnqueueOutcome] = []
        calls = _batch.Chunks(requests, batch_size, max_batch_bytes)
        for chunk in calls:
            try:
                response = await self._call(
                    self._stub.BatchEnqueue, pb.BatchEnqueueRequest(requests=chunk), timeout
                )
                answered = _batch.outcomes(response, len(chunk))
            except JobsError as error:
                if calls.split_if_refused(chunk, error):
                    continue  # sent again as two calls
                if not _batch.too_large(chunk, error, max_batch_bytes):
                    raise
                answered = [_batch.EnqueueOutcome(error=error)]
            if on_chunk is not None:
                heard = on_chunk(len(results), answered)
                if inspect.isawaitable(heard):
                    await heard
            results.extend(answered)
        return results

    async def get_job(self, job_id: str, *, timeout: float | None = None) -> pb.Job:
        """One job by id; :class:`JobNotFoundError` when unknown."""
        response = await self._call(self._stub.GetJob, pb.GetJobRequest(job_id=job_id), timeout)
        return result(response.job)

    async def stream_job_updates(
        self,
        job_ids: Iterable[str] = (),
        *,
        job_types: Iterable[pb.JobType.ValueType] = (),
        statuses: Iterable[pb.JobStatus.ValueType] = (),
        timeout: float | None = None,
    ) -> AsyncGenerator[pb.Job, None]:
        """The current state of each named job, then every change, as they happen.

        With ``job_ids`` the iterator ends once every job is terminal; without, it is
        a live feed filtered by ``job_types`` and ``statuses``. No deadline by default.
        """
        request = pb.StreamJobUpdatesRequest(
            job_ids=list(job_ids), job_types=list(job_types), statuses=list(statuses)
        )
        call = self._stub.StreamJobUpdates(request, timeout=timeout, metadata=self._metadata)
        try:
            async for response in call:
                yield result(response.job)
        except grpc.RpcError as error:
            raise error_from_rpc(error) from None
        finally:
            call.cancel()

    async def stream_job_changes(
        self,
        after_cursor: str = "",
        *,
        job_types: Iterable[pb.JobType.ValueType] = (),
        statuses: Iterable[pb.JobStatus.ValueType] = (),
        timeout: float | None = None,
    ) -> AsyncGenerator[pb.StreamJobChangesResponse, None]:
        """The durable change feed: every change kept after ``after_cursor`` ("" = from
        the oldest kept), in commit order, then new ones live; it never ends by itself.

        Each message has a ``cursor`` (store it with what you did, resume after it) and
        the ``job`` right after the change; a message without ``job``
        (``not HasField("job")``) is a progress mark: nothing matched ``job_types`` and
        ``statuses`` since the last one, store its cursor all the same. A cursor whose
        changes are no longer kept raises :class:`CursorExpiredError`. No deadline by
        default. :class:`~san_jobs.client.inbox.Inbox` consumes it transactionally.
        """
        request = _requests.stream_job_changes_request(
            after_cursor, job_types=job_types, statuses=statuses
        )
        call = self._stub.StreamJobChanges(request, timeout=timeout, metadata=self._metadata)
        try:
            async for response in call:
                yield result(response)
        except grpc.RpcError as error:
            raise error_from_rpc(error) from None
        finally:
            call.cancel()

    async def retry_failed(
        self,
        *,
        job_ids: Iterable[str] = (),
        job_types: Iterable[pb.JobType.ValueType] = (),
        target_ids: Iterable[str] = (),
        error_message_contains: str = "",
        failed_after: datetime | None = None,
        failed_before: datetime | None = None,
        all_failed: bool = False,
        limit: int = 0,
        dry_run: bool = False,
        requested_by: str = "",
        timeout: float | None = None,
    ) -> pb.RetryFailedResponse:
        """Put FAILED jobs matching every given criterion back to PENDING."""
        request = _requests.retry_failed_request(
            job_ids=job_ids,
            job_types=job_types,
            target_ids=target_ids,
            error_message_contains=error_message_contains,
            failed_after=failed_after,
            failed_before=failed_before,
            all_failed=all_failed,
            limit=limit,
            dry_run=dry_run,
            requested_by=requested_by,
        )
        return result(await self._call(self._stub.RetryFailed, request, timeout))

    async def list_jobs(
        self,
        *,
        statuses: Iterable[pb.JobStatus.ValueType] = (),
        job_types: Iterable[pb.JobType.ValueType] = (),
        target_id: str = "",
        error_message_contains: str = "",
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        page_size: int = 0,
        page_token: str = "",
        timeout: float | None = None,
    ) -> pb.ListJobsResponse:
        """One page of jobs matching every given criterion, newest first."""
        request = _requests.list_jobs_request(
            statuses=statuses,
            job_types=job_types,
            target_id=target_id,
            error_message_contains=error_message_contains,
            created_after=created_after,
            created_before=created_before,
            page_size=page_size,
            page_token=page_token,
        )
        return result(await self._call(self._stub.ListJobs, request, timeout))

    async def iter_jobs(
        self,
        *,
        statuses: Iterable[pb.JobStatus.ValueType] = (),
        job_types: Iterable[pb.JobType.ValueType] = (),
        target_id: str = "",
        error_message_contains: str = "",
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        page_size: int = 0,
        timeout: float | None = None,
    ) -> AsyncIterator[pb.Job]:
        """Every job matching the criteria, following the pages."""
        statuses, job_types = list(statuses), list(job_types)
        token = ""
        while True:
            page = await self.list_jobs(
                statuses=statuses,
                job_types=job_types,
                target_id=target_id,
                error_message_contains=error_message_contains,
                created_after=created_after,
                created_before=created_before,
                page_size=page_size,
                page_token=token,
                timeout=timeout,
            )
            for job in page.jobs:
                yield job
            token = page.next_page_token
            if not token:
                return

    async def cancel_job(
        self, job_id: str, *, reason: str = "", timeout: float | None = None
    ) -> pb.Job:
        """Cancel a PENDING or PROCESSING job; :class:`InvalidJobStateError` if terminal."""
        request = pb.CancelJobRequest(job_id=job_id, reason=reason)
        response = await self._call(self._stub.CancelJob, request, timeout)
        return result(response.job)

    async def get_job_stats(self, *, timeout: float | None = None) -> pb.GetJobStatsResponse:
        """Job counts by type and status, and the oldest pending job's creation time."""
        return result(await self._call(self._stub.GetJobStats, pb.GetJobStatsRequest(), timeout))

    async def get_usage(
        self,
        *,
        start_time: datetime | None = None,
        end_time: datetime | None = None,
        job_types: Sequence[pb.JobType.ValueType] = (),
        timeout: float | None = None,
    ) -> pb.GetUsageResponse:
        """Usage of the attempts that ended in [start_time, end_time) (default: the last
        24 hours), summed by job type, model and caller; only `job_types` if given."""
        request = _requests.usage_request(start_time, end_time, job_types)
        return result(await self._call(self._stub.GetUsage, request, timeout))

    async def prune_jobs(
        self, *, dry_run: bool = False, timeout: float | None = None
    ) -> pb.PruneJobsResponse:
        """Delete the terminal jobs past the server's retention now (operators only), or
        with `dry_run` count them per status; a prune already running anywhere is a
        :class:`JobsError` with code ABORTED. Give a long `timeout` for a big backlog."""
        request = pb.PruneJobsRequest(dry_run=dry_run)
        return result(await self._call(self._stub.PruneJobs, request, timeout))

    async def list_failure_groups(
        self,
        *,
        failed_after: datetime | None = None,
        failed_before: datetime | None = None,
        job_types: Sequence[pb.JobType.ValueType] = (),
        timeout: float | None = None,
    ) -> pb.ListFailureGroupsResponse:
        """FAILED jobs of [failed_after, failed_before) (default: the last 24 hours)
        counted by error code, reason and message prefix, largest group first."""
        request = _requests.failure_groups_request(failed_after, failed_before, job_types)
        return result(await self._call(self._stub.ListFailureGroups, request, timeout))

    async def create_schedule(
        self,
        schedule_id: str,
        target_id: str,
        job_input: _requests.JobInput,
        *,
        cron: str | None = None,
        time_zone: str = "",
        interval: timedelta | None = None,
        catchup_window: timedelta | None = None,
        paused: bool = False,
        job_type: pb.JobType.ValueType | None = None,
        requested_by: str = "",
        max_attempts: int = 0,
        priority: int = 0,
        timeout: float | None = None,
    ) -> pb.Schedule:
        """Store a schedule: once per period JobService enqueues the job that
        ``enqueue(target_id, job_input, ...)`` would, with the request_id
        ``schedule:<schedule_id>:<period start>``. Give exactly one of ``cron`` (five
        fields, read in ``time_zone``, an IANA name, default UTC) and ``interval``
        (at least 1 s). Periods missed while no instance ran are fired if they began
        within ``catchup_window``. The same call again returns the stored schedule; the
        same id with another definition raises :class:`ScheduleExistsError`."""
        schedule = _requests.schedule_message(
            schedule_id,
            target_id,
            job_input,
            cron=cron,
            time_zone=time_zone,
            interval=interval,
            catchup_window=catchup_window,
            paused=paused,
            job_type=job_type,
            requested_by=requested_by,
            max_attempts=max_attempts,
            priority=priority,
        )
        request = pb.CreateScheduleRequest(schedule=schedule)
        response = await self._call(self._stub.CreateSchedule, request, timeout)
        return result(response.schedule)

    async def get_schedule(self, schedule_id: str, *, timeout: float | None = None) -> pb.Schedule:
        """One of the caller's schedules; :class:`ScheduleNotFoundError` when unknown."""
        request = pb.GetScheduleRequest(schedule_id=schedule_id)
        return result((await self._call(self._stub.GetSchedule, request, timeout)).schedule)

    async def list_schedules(
        self, *, page_size: int = 0, page_token: str = "", timeout: float | None = None
    ) -> pb.ListSchedulesResponse:
        """One page of the caller's schedules (an operator's: everyone's), by id."""
        request = pb.ListSchedulesRequest(page_size=page_size, page_token=page_token)
        return result(await self._call(self._stub.ListSchedules, request, timeout))

    async def iter_schedules(
        self, *, page_size: int = 0, timeout: float | None = None
    ) -> AsyncIterator[pb.Schedule]:
        """Every schedule :meth:`list_schedules` shows, following the pages."""
        token = ""
        while True:
            page = await self.list_schedules(page_size=page_size, page_token=token, timeout=timeout)
            for schedule in page.schedules:
                yield schedule
            token = page.next_page_token
            if not token:
                return

    async def delete_schedule(self, schedule_id: str, *, timeout: float | None = None) -> None:
        """Remove a schedule (the jobs it enqueued stay); :class:`ScheduleNotFoundError`."""
        request = pb.DeleteScheduleRequest(schedule_id=schedule_id)
        await self._call(self._stub.DeleteSchedule, request, timeout)

    async def pause_schedule(
        self, schedule_id: str, *, timeout: float | None = None
    ) -> pb.Schedule:
        """Stop a schedule firing (its periods meanwhile are skipped); a no-op if paused."""
        request = pb.PauseScheduleRequest(schedule_id=schedule_id)
        return result((await self._call(self._stub.PauseSchedule, request, timeout)).schedule)

    async def resume_schedule(
        self, schedule_id: str, *, timeout: float | None = None
    ) -> pb.Schedule:
        """Let a paused schedule fire again from its next period; a no-op if running."""
        request = pb.ResumeScheduleRequest(schedule_id=schedule_id)
        return result((await self._call(self._stub.ResumeSchedule, request, timeout)).schedule)

    async def watch(
        self,
        job_id: str,
        timeout: float | None = None,
        *,
        poll_interval: float = POLL_INTERVAL,
    ) -> AsyncGenerator[pb.Job, None]:
        """Each new state of one job until it is terminal (the last one yielded).

        Built on StreamJobUpdates; if the stream breaks, GetJob is polled every
        ``poll_interval`` seconds instead. Raises :class:`WaitTimeoutError` after
        ``timeout`` seconds (no limit when None).
        """
        deadline = _requests.Deadline(job_id, timeout)
        changes = _requests.ChangeFilter()
        try:
            updates = self.stream_job_updates([job_id], timeout=deadline.remaining())
            async with aclosing(updates):
                async for job in updates:
                    if changes.is_new(job):
                        yield job
                    if _requests.is_terminal(job):
                        return
        except (JobNotFoundError, InvalidRequestError):
            raise
        except JobsError:
            deadline.remaining()  # our own deadline passing is a timeout, not a broken stream
        failures = 0
        while True:
            try:
                job = await self.get_job(job_id, timeout=deadline.cap(self.settings.timeout))
            except ServiceUnavailableError:
                failures += 1
                if failures >= MAX_POLL_FAILURES:
                    raise
            else:
                failures = 0
                if changes.is_new(job):
                    yield job
                if _requests.is_terminal(job):
                    return
            await asyncio.sleep(deadline.cap(poll_interval))

    async def wait(
        self, job_id: str, timeout: float | None = None, *, poll_interval: float = POLL_INTERVAL
    ) -> pb.Job:
        """Wait until the job is terminal and return it (see :meth:`watch`)."""
        last: pb.Job | None = None
        watch = self.watch(job_id, timeout, poll_interval=poll_interval)
        async with aclosing(watch):
            async for job in watch:
                last = job
        if last is None:  # pragma: no cover - watch always yields the terminal state
            raise JobsError(f"job {job_id} was never seen")
        return last
