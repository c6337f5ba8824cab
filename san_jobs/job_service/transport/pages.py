"""ListJobs pages that fit the send limit whatever the jobs hold.

A page is cut short by the serialized size of its jobs (AIP-158 allows a page
shorter than page_size) and continues with a next_page_token after the last job
sent. A page always holds at least one job, so paging makes progress; a job too big
for a page alone is sent without its input.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from san_jobs.job_service.domain.dispatch import DispatchPause
from san_jobs.job_service.domain.model import Job, JobType
from san_jobs.job_service.domain.page_token import encode_page_token
from san_jobs.job_service.transport.convert import job_to_pb
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

# ListJobsResponse.jobs is field 1: one tag byte before each job's length.
_JOBS_TAG_BYTES = 1


def _varint_bytes(value: int) -> int:
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


def encoded_entry_bytes(message: pb.Job) -> int:
    """What one job adds to a ListJobsResponse on the wire: tag, length, message."""
    size = message.ByteSize()
    return _JOBS_TAG_BYTES + _varint_bytes(size) + size


def fit_page(
    jobs: Sequence[Job],
    next_token: str | None,
    budget_bytes: int,
    pauses: Mapping[JobType, DispatchPause] | None = None,
) -> pb.ListJobsResponse:
    """The ListJobsResponse of `jobs` (one page from the store, and the token after
    it), cut before the first job that would take the jobs past `budget_bytes`.
    `pauses`: the paused job types, for the PENDING jobs' `waiting_for`."""
    messages: list[pb.Job] = []
    used = 0
    for index, job in enumerate(jobs):
        message = job_to_pb(job) if pauses is None else job_to_pb(job, pauses=pauses)
        size = encoded_entry_bytes(message)
        if not messages and size > budget_bytes:
            # A job too big for any page alone (an input stored before the merged
            # input's bound): sent without its input, which GetJob's caller can still
            # try to read, rather than failing every page that reaches it.
            message = job_to_pb(job, with_input=False, pauses=pauses or {})
            size = encoded_entry_bytes(message)
        used += size
        if messages and used > budget_bytes:
            last = jobs[index - 1]
            next_token = encode_page_token(last.created_at, last.id)
            break
        messages.append(message)
    return pb.ListJobsResponse(jobs=messages, next_page_token=next_token or "")
