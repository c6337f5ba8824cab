"""JobService over grpc.aio: decode, call the application, encode. No SQL, no rules."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
from san.jobs.v1 import job_service_pb2 as pb
from san.jobs.v1 import job_service_pb2_grpc as pb_grpc

from job_service.app import JobApplication
from job_service.auth.roles import current_caller
from job_service.domain.errors import JobNotFoundError
from job_service.domain.freshness import supersedes
from job_service.domain.limits import DEFAULT_MAX_MESSAGE_BYTES, LIST_PAGE_HEADROOM_BYTES
from job_service.domain.model import Job
from job_service.domain.validation import EnqueueLimits
from job_service.transport import requests
from job_service.transport.convert import job_to_pb, stats_to_pb
from job_service.transport.decoding import add_lenient_service
from job_service.transport.errors import stream_errors, unary_errors
from job_service.transport.pages import fit_page
from job_service.transport.stream_limits import (
    StreamGate,
    StreamRefusedError,
    connection_key,
    peer_key,
)

log = logging.getLogger(__name__)

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
    ) -> None:
        self._app = app
        # What a ListJobs page's jobs may take of the send limit (--max-message-bytes).
        self._page_budget_bytes = max_message_bytes - LIST_PAGE_HEADROOM_BYTES
        self._limits = limits
        self._default_max_attempts = default_max_attempts
        self._stream_gate = stream_gate

    @unary_errors
    async def Enqueue(self, request: pb.EnqueueRequest, context: Context) -> pb.EnqueueResponse:
        new, on_duplicate = requests.enqueue(request, self._limits, self._default_max_attempts)
        caller = current_caller.get()
        if caller is not None:
            # Who asks is who authenticated, whatever the request says.
            new = dataclasses.replace(new, requested_by=caller.name)
        job, deduplicated = await self._app.enqueue(new, on_duplicate)
        # No input in the answer: the caller has it, and it may be megabytes (GetJob
        # returns it).
        return pb.EnqueueResponse(job=job_to_pb(job, with_input=False), deduplicated=deduplicated)

    @unary_errors
    async def GetJob(self, request: pb.GetJobRequest, context: Context) -> pb.GetJobResponse:
        job = await self._app.get(requests.job_id("job_id", request.job_id), _owner())
        return pb.GetJobResponse(job=job_to_pb(job))

    @unary_errors
    async def ListJobs(self, request: pb.ListJobsRequest, context: Context) -> pb.ListJobsResponse:
        job_filter, page_size, token = requests.list_jobs(request)
        owner = _owner()
        if owner is not None:
            job_filter = dataclasses.replace(job_filter, requested_by=owner)
        jobs, next_token = await self._app.list_jobs(job_filter, page_size, token)
        return fit_page(jobs, next_token, self._page_budget_bytes)

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
        return stats_to_pb(await self._app.stats())

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
                    yield pb.StreamJobUpdatesResponse(job=job_to_pb(job))
            else:
                while True:
                    for job in await subscription.get():
                        yield pb.StreamJobUpdatesResponse(job=job_to_pb(job))
        finally:
            end(None)

    async def _watch_jobs(
        self, job_ids: tuple[str, ...], subscription: Any, owner: str | None
    ) -> AsyncIterator[Job]:
        snapshot = await self._app.load(job_ids, owner)
        for job_id in job_ids:
            if job_id not in snapshot:
                raise JobNotFoundError(job_id)
        last_sent: dict[str, Job] = {}
        open_ids = set(job_ids)
        for job_id in job_ids:
            job = snapshot[job_id]
            last_sent[job_id] = job
            if job.status.is_terminal:
                open_ids.discard(job_id)
            yield job
        while open_ids:
            for job in await subscription.get():
                previous = last_sent.get(job.id)
                if previous is not None and not supersedes(job, previous):
                    continue
                last_sent[job.id] = job
                if job.status.is_terminal:
                    open_ids.discard(job.id)
                yield job


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
