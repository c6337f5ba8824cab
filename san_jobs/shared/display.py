"""How jobs read to people, shared by jobsctl and san-web: plain-word names of the
contract's enums and one time format."""

from __future__ import annotations

from datetime import UTC
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb


def job_type_name(value: pb.JobType.ValueType) -> str:
    """``CARD_ANALYSIS`` for ``JOB_TYPE_CARD_ANALYSIS``."""
    return pb.JobType.Name(value).removeprefix("JOB_TYPE_")


def status_name(value: pb.JobStatus.ValueType) -> str:
    """``COMPLETED`` for ``JOB_STATUS_COMPLETED``."""
    return pb.JobStatus.Name(value).removeprefix("JOB_STATUS_")


def format_time(stamp: Timestamp) -> str:
    """``2026-11-29T12:00:01Z``, or ``-`` when unset."""
    if stamp.seconds == 0 and stamp.nanos == 0:
        return "-"
    return stamp.ToDatetime(tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pause_reason_name(value: pb.PauseReason.ValueType) -> str:
    """``CIRCUIT_OPEN`` for ``PAUSE_REASON_CIRCUIT_OPEN``."""
    return pb.PauseReason.Name(value).removeprefix("PAUSE_REASON_")


def waiting_text(pause: pb.DispatchPause) -> str:
    """Why a PENDING job waits (for jobs it depends on, or behind a pause of its
    type), in one sentence:
    ``the AI provider has been unavailable since 2026-12-01T15:04:00Z; next try at
    ...``. Times are UTC, as everywhere in the clients."""
    if pause.reason == pb.PAUSE_REASON_DEPENDENCIES:
        ids = list(pause.job_ids)
        shown = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
        return f"waiting for {len(ids)} {'job' if len(ids) == 1 else 'jobs'} it depends on: {shown}"
    since, until = format_time(pause.since), format_time(pause.until)
    if pause.reason == pb.PAUSE_REASON_RATE_LIMITED:
        return f"the AI provider has been rate limiting since {since}; resuming at {until}"
    return f"the AI provider has been unavailable since {since}; retrying (next try at {until})"


def count_dicts(stats: pb.GetJobStatsResponse) -> list[dict[str, Any]]:
    """GetJobStats' counts as JSON objects (jobsctl stats --json, san-web /ops)."""
    return [
        {"jobType": job_type_name(c.job_type), "status": status_name(c.status), "count": c.count}
        for c in stats.counts
    ]


def pause_dicts(stats: pb.GetJobStatsResponse) -> list[dict[str, Any]]:
    """GetJobStats' paused job types as JSON objects (jobsctl stats --json, san-web /ops)."""
    return [
        {
            "jobType": job_type_name(p.job_type),
            "reason": pause_reason_name(p.reason),
            "since": format_time(p.since),
            "until": format_time(p.until),
            "lastError": p.last_error,
        }
        for p in stats.paused
    ]


def format_duration(seconds: float) -> str:
    """``10m``, ``1h30m``, ``1d``, ``1.5s``: as ``--every`` reads them."""
    whole, fraction = divmod(seconds, 1)
    rest = int(whole)
    parts = []
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    if rest or fraction or not parts:
        parts.append(f"{rest + fraction:g}s")
    return "".join(parts)


def period_text(schedule: pb.Schedule) -> str:
    """``every 10m``, or ``cron 0 21 * * * Europe/Paris`` (UTC when no zone)."""
    if schedule.WhichOneof("period") == "interval":
        return f"every {format_duration(schedule.interval.ToNanoseconds() / 1e9)}"
    return f"cron {schedule.cron} {schedule.time_zone or 'UTC'}"
