"""The asyncio JobService client (grpc.aio)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Sequence
from contextlib import aclosing
from datetime import datetime
from types import TracebackType
from typing import Self, TypeVar

import grpc

from san_jobs.client import _batch, _requests
from san_jobs.client._channel import DEFAULT_TIMEOUT, ChannelSettings, PemSource
from san_jobs.client._client import MAX_POLL_FAILURES, POLL_INTERVAL
from san_jobs.client._errors import (
    InvalidRequestError,
    JobNotFoundError,
    JobsError,
    ServiceUnavailableError,
    error_from_rpc,
)
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from san_jobs.proto.jobs.v1 import job_service_pb2_grpc as pb_grpc

T = TypeVar("T")


class AsyncJobsClient:
    """An asyncio client of JobService, the twin of :class:`~san_jobs.client.JobsClient`.

    Create it inside the running event loop; ``async with`` closes it. TLS settings
    and ``token`` are those of :class:`~san_jobs.client.JobsClient`.
    """

    def __init__(
        self,
        target: str = "127.0.0.1:50051",
        *,
        tls: bool = False,
        root_certificates: bytes | None = None,
        tls_ca: PemSource | None = None,
        tls_cert: PemSource | None = None,
        tls_key: PemSource | None = None,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        channel: grpc.aio.Channel | None = None,
    ) -> None:
        self.settings = ChannelSettings.build(
            target,
            tls=tls,
            root_certificates=root_certificates,
            tls_ca=tls_ca,
            tls_cert=tls_cert,
            tls_key=tls_key,
            token=token,
            timeout=timeout,
        )
        if channel is None:
            credentials = self.settings.credentials()
            if credentials is not None:
                channel = grpc.aio.secure_channel(target, credentials, self.settings.options())
            else:
                channel = grpc.aio.insecure_channel(target, self.settings.options())
        self._channel = channel
        self._stub = pb_grpc.JobServiceStub(channel)
        self._metadata = self.settings.call_metadata()

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
        await self._channel.close(None)

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
        timeout: float | None = None,
    ) -> pb.EnqueueResponse:
        """Store a job as PENDING (see :meth:`JobsClient.enqueue`)."""
        request = _requests.enqueue_request(
            target_id,
            job_input,
            job_type=job_type,
            requested_by=requested_by,
            request_id=request_id,
            max_attempts=max_attempts,
            return_existing=return_existing,
        )
        return await self._call(self._stub.Enqueue, request, timeout)

    async def enqueue_many(
        self,
        requests: Iterable[pb.EnqueueRequest],
        *,
        batch_size: int = _batch.DEFAULT_BATCH_SIZE,
        max_batch_bytes: int = _batch.DEFAULT_MAX_BATCH_BYTES,
        timeout: float | None = None,
        on_chunk: _batch.ChunkCallback | None = None,
    ) -> list[_batch.EnqueueOutcome]:
        """Store many jobs with BatchEnqueue, one call at a time: one outcome per
        request, in order (see :meth:`JobsClient.enqueue_many`)."""
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
                on_chunk(len(results), answered)
            results.extend(answered)
        return results

    async def get_job(self, job_id: str, *, timeout: float | None = None) -> pb.Job:
        """One job by id; :class:`JobNotFoundError` when unknown."""
        response = await self._call(self._stub.GetJob, pb.GetJobRequest(job_id=job_id), timeout)
        return response.job

    async def stream_job_updates(
        self,
        job_ids: Iterable[str] = (),
        *,
        job_types: Iterable[pb.JobType.ValueType] = (),
        statuses: Iterable[pb.JobStatus.ValueType] = (),
        timeout: float | None = None,
    ) -> AsyncGenerator[pb.Job, None]:
        """The current state of each named job, then every change (see the sync twin)."""
        request = pb.StreamJobUpdatesRequest(
            job_ids=list(job_ids), job_types=list(job_types), statuses=list(statuses)
        )
        call = self._stub.StreamJobUpdates(request, timeout=timeout, metadata=self._metadata)
        try:
            async for response in call:
                yield response.job
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
        return await self._call(self._stub.RetryFailed, request, timeout)

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
        return await self._call(self._stub.ListJobs, request, timeout)

    async def cancel_job(
        self, job_id: str, *, reason: str = "", timeout: float | None = None
    ) -> pb.Job:
        """Cancel a PENDING or PROCESSING job; :class:`InvalidJobStateError` if terminal."""
        request = pb.CancelJobRequest(job_id=job_id, reason=reason)
        response = await self._call(self._stub.CancelJob, request, timeout)
        return response.job

    async def get_job_stats(self, *, timeout: float | None = None) -> pb.GetJobStatsResponse:
        """Job counts by type and status, and the oldest pending job's creation time."""
        return await self._call(self._stub.GetJobStats, pb.GetJobStatsRequest(), timeout)

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
        return await self._call(self._stub.GetUsage, request, timeout)

    async def prune_jobs(
        self, *, dry_run: bool = False, timeout: float | None = None
    ) -> pb.PruneJobsResponse:
        """Delete the terminal jobs past the server's retention now (operators only), or
        with `dry_run` count them per status; a prune already running anywhere is a
        :class:`JobsError` with code ABORTED. Give a long `timeout` for a big backlog."""
        request = pb.PruneJobsRequest(dry_run=dry_run)
        return await self._call(self._stub.PruneJobs, request, timeout)

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
        return await self._call(self._stub.ListFailureGroups, request, timeout)

    async def watch(
        self,
        job_id: str,
        timeout: float | None = None,
        *,
        poll_interval: float = POLL_INTERVAL,
    ) -> AsyncGenerator[pb.Job, None]:
        """Each new state of one job until it is terminal (see :meth:`JobsClient.watch`)."""
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
