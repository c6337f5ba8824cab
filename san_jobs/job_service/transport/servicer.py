"""JobService over grpc.aio: decode, call the application, encode. No SQL, no rules."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any, cast

import grpc

from san_jobs.job_service.app import JobApplication
from san_jobs.job_service.auth.roles import Role, current_caller
from san_jobs.job_service.change_feed import ChangeFeed
from san_jobs.job_service.domain.dispatch import DispatchPause
from san_jobs.job_service.domain.errors import (
    FieldViolation,
    InvalidRequestError,
    JobNotFoundError,
)
from san_jobs.job_service.domain.failure_groups import MAX_FAILURE_GROUPS
from san_jobs.job_service.domain.freshness import supersedes
from san_jobs.job_service.domain.limits import (
    DEFAULT_MAX_MESSAGE_BYTES,
    LIST_PAGE_HEADROOM_BYTES,
    MAX_USAGE_GROUPS,
)
from san_jobs.job_service.domain.model import Job, JobStatus
from san_jobs.job_service.domain.priorities import UrgentPriorities
from san_jobs.job_service.domain.validation import EnqueueLimits
from san_jobs.job_service.pruner import Pruner
from san_jobs.job_service.schedule_app import ScheduleApplication
from san_jobs.job_service.transport import batch, requests
from san_jobs.job_service.transport.convert import (
    failure_groups_to_pb,
    job_to_pb,
    stats_to_pb,
    usage_totals_to_pb,
)
from san_jobs.job_service.transport.decoding import PartlyDecodedBatch, add_lenient_service
from san_jobs.job_service.transport.errors import stream_errors, unary_errors
from san_jobs.job_service.transport.pages import fit_page
from san_jobs.job_service.transport.pause_cache import PauseCache
from san_jobs.job_service.transport.prune import prune_response
from san_jobs.job_service.transport.schedules import ScheduleRpcs
from san_jobs.job_service.transport.stream_limits import (
    StreamGate,
    StreamRefusedError,
    connection_key,
    peer_key,
)
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc
from san_jobs.shared.trace_context import current_traceparent

log = logging.getLogger("job_service.transport.servicer")

Context = grpc.aio.ServicerContext[Any, Any]


class JobServiceServicer(pb_grpc.JobServiceServicer):
    def __init__(
        self,
        app: JobApplication,
        limits: EnqueueLimits,
        default_max_attempts: int,
        *,
        stream_gate: StreamGate,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        pauses: PauseCache | None = None,
        pruner: Pruner | None = None,
        change_feed: ChangeFeed | None = None,
        schedules: ScheduleApplication | None = None,
        urgent: UrgentPriorities | None = None,
    ) -> None:
        self._app = app
        # Who may use the most urgent priorities (--submitter-most-urgent-priority).
        self._urgent = urgent or UrgentPriorities()
        # The schedule RPCs (transport/schedules.py) on the schedules' application
        # (None: a servicer made without one, in tests, answers them UNIMPLEMENTED).
        self._schedules = (
            None
            if schedules is None
            else ScheduleRpcs(
                schedules,
                limits,
                default_max_attempts,
                urgent=self._urgent,
                max_message_bytes=max_message_bytes,
            )
        )
        # StreamJobChanges' source (None: a servicer made without one, in tests).
        self._change_feed = change_feed
        # PruneJobs runs the server's pruner, the retention's application service (its
        # retention and lock; None: a servicer made without one, in tests).
        self._pruner = pruner
        # The paused job types, for GetJobStats and each PENDING job's waiting_for:
        # one store read a second at most, however many jobs are converted.
        self._pauses = pauses or PauseCache(lambda: app.dispatch_pauses())
        # What a ListJobs page's jobs may take of the send limit (--max-message-bytes).
        self._page_budget_bytes = max_message_bytes - LIST_PAGE_HEADROOM_BYTES
        # A BatchEnqueue answer is the whole message: it may take all of the limit.
        self._max_message_bytes = max_message_bytes
        self._limits = limits
        self._default_max_attempts = default_max_attempts
        self._stream_gate = stream_gate

    @unary_errors
    async def Enqueue(self, request: pb.EnqueueRequest, context: Context) -> pb.EnqueueResponse:
        caller = current_caller.get()
        decoded = requests.enqueue(
            request,
            self._limits,
            self._default_max_attempts,
            # Who asks is who authenticated, whatever the request says; and its keys
            # (request_id, the active target) are its own (NewJob.tenant).
            caller=None if caller is None else caller.name,
            # This call's span, stored with the job: its attempts join the caller's trace.
            traceparent=current_traceparent(),
        )
        if caller is not None:
            problem = self._urgent.problem(
                decoded.job.priority, caller.name, caller.role is Role.SUBMITTER
            )
            if problem is not None:
                raise InvalidRequestError([FieldViolation(requests.PRIORITY_FIELD, problem)])
        job, deduplicated = await self._app.enqueue(decoded)
        # No input in the answer: the caller has it, and it may be megabytes (GetJob
        # returns it).
        message = job_to_pb(job, with_input=False, pauses=await self._pauses.current())
        return pb.EnqueueResponse(job=message, deduplicated=deduplicated)

    @unary_errors
    async def BatchEnqueue(
        self, request: pb.BatchEnqueueRequest | PartlyDecodedBatch, context: Context
    ) -> pb.BatchEnqueueResponse:
        caller = current_caller.get()
        undecodable: dict[int, FieldViolation] = {}
        if isinstance(request, PartlyDecodedBatch):  # items that are not messages
            undecodable = request.undecodable
            request = cast(pb.BatchEnqueueRequest, request.request)
        decoded = batch.decode(
            request,
            self._limits,
            self._default_max_attempts,
            requested_by=None if caller is None else caller.name,
            traceparent=current_traceparent(),
            priority_problem=None
            if caller is None
            else functools.partial(
                self._urgent.problem, caller=caller.name, submitter=caller.role is Role.SUBMITTER
            ),
            answer_budget_bytes=self._max_message_bytes,
            undecodable=undecodable,
        )
        outcomes = await self._app.enqueue_many(decoded.items) if decoded.items else []
        # The pauses once for the whole answer, not once per job.
        pauses = await self._pauses.current()
        return batch.response(decoded, outcomes, pauses, self._max_message_bytes)

    @unary_errors
    async def GetJob(self, request: pb.GetJobRequest, context: Context) -> pb.GetJobResponse:
        job = await self._app.get(requests.job_id("job_id", request.job_id), _owner())
        return pb.GetJobResponse(job=job_to_pb(job, pauses=await self._pauses.current()))

    @unary_errors
    async def ListJobs(self, request: pb.ListJobsRequest, context: Context) -> pb.ListJobsResponse:
        job_filter, page_size, token = requests.list_jobs(request)
        owner = _owner()
        if owner is not None:
            job_filter = dataclasses.replace(job_filter, requested_by=owner)
        jobs, next_token = await self._app.list_jobs(job_filter, page_size, token)
        return fit_page(jobs, next_token, self._page_budget_bytes, await self._pauses.current())

    @unary_errors
    async def CancelJob(
        self, request: pb.CancelJobRequest, context: Context
    ) -> pb.CancelJobResponse:
        job_id, reason = requests.cancel(request)
        job = await self._app.cancel(job_id, reason, actor=_actor(""), owner=_owner())
        return pb.CancelJobResponse(job=job_to_pb(job))

    @unary_errors
    async def RetryFailed(
        self, request: pb.RetryFailedRequest, context: Context
    ) -> pb.RetryFailedResponse:
        job_filter, limit = requests.retry_failed(request)
        outcome = await self._app.retry_failed(
            job_filter, limit, request.dry_run, _actor(request.requested_by)
        )
        return pb.RetryFailedResponse(
            matched_count=outcome.matched_count,
            retried_count=0 if request.dry_run else len(outcome.retried_ids),
            job_ids=list(outcome.retried_ids),
            skipped=[pb.SkippedJob(job_id=i, reason=r) for i, r in outcome.skipped],
        )

    @unary_errors
    async def GetJobStats(
        self, request: pb.GetJobStatsRequest, context: Context
    ) -> pb.GetJobStatsResponse:
        stats = await self._app.stats()
        # Read now, not from the cache: this is where an operator looks first.
        paused = await self._pauses.fresh()
        return stats_to_pb(stats, paused.values())

    @unary_errors
    async def GetUsage(self, request: pb.GetUsageRequest, context: Context) -> pb.GetUsageResponse:
        query = requests.usage(request, datetime.now(UTC), _owner())
        totals, truncated = await self._app.usage_totals(query, MAX_USAGE_GROUPS)
        return usage_totals_to_pb(totals, truncated, query)

    @unary_errors
    async def ListFailureGroups(
        self, request: pb.ListFailureGroupsRequest, context: Context
    ) -> pb.ListFailureGroupsResponse:
        query = requests.failure_groups(request, datetime.now(UTC))
        groups, truncated = await self._app.failure_groups(query, MAX_FAILURE_GROUPS)
        return failure_groups_to_pb(groups, truncated, query)

    @unary_errors
    async def PruneJobs(
        self, request: pb.PruneJobsRequest, context: Context
    ) -> pb.PruneJobsResponse:
        pruner = self._pruner
        if pruner is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this server runs no pruner")
            raise AssertionError("unreachable")
        actor = _actor("")
        if request.dry_run:
            return prune_response(await pruner.dry_run(actor), dry_run=True)
        return prune_response(await pruner.prune(actor), dry_run=False)

    async def _schedule_rpcs(self, context: Context) -> ScheduleRpcs:
        if self._schedules is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this server keeps no schedules")
            raise AssertionError("unreachable")
        return self._schedules

    @unary_errors
    async def CreateSchedule(
        self, request: pb.CreateScheduleRequest, context: Context
    ) -> pb.CreateScheduleResponse:
        rpcs = await self._schedule_rpcs(context)
        return await rpcs.create(request)

    @unary_errors
    async def GetSchedule(
        self, request: pb.GetScheduleRequest, context: Context
    ) -> pb.GetScheduleResponse:
        rpcs = await self._schedule_rpcs(context)
        return await rpcs.get(request)

    @unary_errors
    async def ListSchedules(
        self, request: pb.ListSchedulesRequest, context: Context
    ) -> pb.ListSchedulesResponse:
        rpcs = await self._schedule_rpcs(context)
        return await rpcs.list(request)

    @unary_errors
    async def DeleteSchedule(
        self, request: pb.DeleteScheduleRequest, context: Context
    ) -> pb.DeleteScheduleResponse:
        rpcs = await self._schedule_rpcs(context)
        return await rpcs.delete(request)

    @unary_errors
    async def PauseSchedule(
        self, request: pb.PauseScheduleRequest, context: Context
    ) -> pb.PauseScheduleResponse:
        rpcs = await self._schedule_rpcs(context)
        return await rpcs.pause(request)

    @unary_errors
    async def ResumeSchedule(
        self, request: pb.ResumeScheduleRequest, context: Context
    ) -> pb.ResumeScheduleResponse:
        rpcs = await self._schedule_rpcs(context)
        return await rpcs.resume(request)

    @stream_errors
    async def StreamJobUpdates(
        self, request: pb.StreamJobUpdatesRequest, context: Context
    ) -> AsyncIterator[pb.StreamJobUpdatesResponse]:
        wanted = requests.stream(request)
        try:
            lease = self._stream_gate.admit(
                peer_key(context), connection_key(context), feed=not wanted.job_ids
            )
        except StreamRefusedError as refused:
            await context.abort_with_status(refused.to_status())  # type: ignore[attr-defined]
            return
        # Subscribe before reading the snapshot, so no change between the two is lost.
        subscription = self._app.hub.subscribe(wanted.job_ids, wanted.job_types, wanted.statuses)

        def end(_: object) -> None:
            subscription.close()
            lease.release()

        # Whichever comes first ends the stream's claims: the finally below, or grpc
        # ending the call (that covers a generator left suspended at a yield).
        # grpc-stubs types the callback as a class, not a Protocol: hence the ignore.
        context.add_done_callback(end)  # type: ignore[arg-type]
        try:
            if wanted.job_ids:
                async for job in self._watch_jobs(wanted.job_ids, subscription, _owner()):
                    # The pauses _watch_jobs read for this job, so what it remembers
                    # having shown is what is sent (no await in between).
                    message = job_to_pb(job, pauses=self._pauses.last)
                    yield pb.StreamJobUpdatesResponse(job=message)
            else:
                while True:
                    for job in await subscription.get():
                        pauses = await self._pauses.current()
                        yield pb.StreamJobUpdatesResponse(job=job_to_pb(job, pauses=pauses))
        finally:
            end(None)

    @stream_errors
    async def StreamJobChanges(
        self, request: pb.StreamJobChangesRequest, context: Context
    ) -> AsyncIterator[pb.StreamJobChangesResponse]:
        after_cursor, wanted = requests.stream_changes(request)
        if self._change_feed is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this server keeps no change feed")
            return
        try:
            # A feed stream: offered every change, bounded as StreamJobUpdates' live feeds.
            lease = self._stream_gate.admit(peer_key(context), connection_key(context), feed=True)
        except StreamRefusedError as refused:
            await context.abort_with_status(refused.to_status())  # type: ignore[attr-defined]
            return
        context.add_done_callback(lambda _: lease.release())  # type: ignore[arg-type]
        wanted = dataclasses.replace(wanted, requested_by=_owner())
        try:
            async for cursor, job in self._change_feed.follow(after_cursor, wanted):
                if job is None:
                    yield pb.StreamJobChangesResponse(cursor=cursor)
                    continue
                pauses = await self._pauses.current() if job.status is JobStatus.PENDING else {}
                message = job_to_pb(job, with_input=False, pauses=pauses)
                yield pb.StreamJobChangesResponse(cursor=cursor, job=message)
        finally:
            lease.release()

    async def _watch_jobs(
        self, job_ids: tuple[str, ...], subscription: Any, owner: str | None
    ) -> AsyncIterator[Job]:
        """The named jobs' states to send: the snapshot, then each change in order,
        and a PENDING job's state again when the pause of its type opens, closes or
        moves (the caller converts each with `self._pauses.last`)."""
        snapshot = await self._app.load(job_ids, owner)
        for job_id in job_ids:
            if job_id not in snapshot:
                raise JobNotFoundError(job_id)
        last_sent: dict[str, Job] = {}
        # The pause each sent PENDING job was shown waiting for (None: not waiting).
        shown: dict[str, DispatchPause | None] = {}
        open_ids = set(job_ids)

        async def showing(job: Job) -> Job:
            pauses = await self._pauses.current()
            last_sent[job.id] = job
            shown[job.id] = pauses.get(job.job_type) if job.status is JobStatus.PENDING else None
            return job

        for job_id in job_ids:
            job = snapshot[job_id]
            if job.status.is_terminal:
                open_ids.discard(job_id)
            yield await showing(job)
        while open_ids:
            changes, pause_moved = await self._next_changes(
                subscription, last_sent, shown, open_ids
            )
            for job in changes:
                previous = last_sent.get(job.id)
                if previous is not None and not supersedes(job, previous):
                    continue
                if job.status.is_terminal:
                    open_ids.discard(job.id)
                yield await showing(job)
            for job_id in pause_moved:
                job = last_sent[job_id]
                if job.status is JobStatus.PENDING and job_id in open_ids:
                    yield await showing(job)

    async def _next_changes(
        self,
        subscription: Any,
        last_sent: dict[str, Job],
        shown: dict[str, DispatchPause | None],
        open_ids: set[str],
    ) -> tuple[list[Job], list[str]]:
        """The next batch of changes of the watched jobs, and the open PENDING jobs
        whose type's pause differs from the one they were shown with. The pause set
        is waited on (polled) only while such a job is open: nothing else shows it."""
        waiting = [i for i in open_ids if last_sent[i].status is JobStatus.PENDING]
        if not waiting:
            return await subscription.get(), []

        def moved() -> list[str]:
            pauses = self._pauses.last
            return [i for i in waiting if pauses.get(last_sent[i].job_type) != shown[i]]

        version = self._pauses.version
        if moved():  # the pauses changed while the last states were being sent
            return [], moved()
        changes_task = asyncio.ensure_future(subscription.get())
        pause_task = asyncio.ensure_future(self._pauses.wait_for_change(version))
        try:
            await asyncio.wait((changes_task, pause_task), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (changes_task, pause_task):
                if not task.done():
                    task.cancel()
        # Cancelling get() loses nothing: it takes its buffer only when it returns.
        changes = changes_task.result() if _finished(changes_task) else []
        return changes, moved()


def _finished(task: asyncio.Future[Any]) -> bool:
    return task.done() and not task.cancelled()


def _owner() -> str | None:
    """The requested_by every job of this call must have (a submitter under --auth
    token), or None: any job."""
    caller = current_caller.get()
    return None if caller is None else caller.owner


def _actor(label: str) -> str:
    """Who makes this call, for the audit log: the token's name and role, or under
    --auth off the label the caller sent (unverified, and said so)."""
    caller = current_caller.get()
    if caller is not None:
        return f"{caller.name} ({caller.role.value})"
    return f"{label or '-'} (unauthenticated)"


def add_job_service_to_server(servicer: JobServiceServicer, server: grpc.aio.Server) -> None:
    """Serve `servicer` on `server`, like the generated add_JobServiceServicer_to_server,
    except that a request that is not a valid message (bad UTF-8 in a string field)
    gets INVALID_ARGUMENT naming the field instead of gRPC's UNKNOWN."""
    add_lenient_service(servicer, pb.DESCRIPTOR.services_by_name["JobService"], server)
