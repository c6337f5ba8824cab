"""PruneJobs' answer, from the pruner's report (domain/retention.py)."""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf.duration_pb2 import Duration

from san_jobs.job_service.domain.retention import PruneCount
from san_jobs.job_service.transport.convert import STATUS_TO_PB, timestamp
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb


def prune_count_to_pb(count: PruneCount) -> pb.PruneCount:
    retention = None
    if count.retention_seconds is not None:
        retention = Duration()
        retention.FromNanoseconds(round(count.retention_seconds * 1e9))
    return pb.PruneCount(
        status=STATUS_TO_PB[count.status],
        retention=retention,
        cutoff_time=timestamp(count.cutoff),
        count=count.count,
        more=count.more,
    )


def prune_response(report: Iterable[PruneCount], dry_run: bool) -> pb.PruneJobsResponse:
    return pb.PruneJobsResponse(counts=[prune_count_to_pb(c) for c in report], dry_run=dry_run)
