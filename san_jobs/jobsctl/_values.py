"""Parsing of command-line values and naming of enums, shared by jobsctl and san-web."""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime, timedelta

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_job_type(text: str) -> pb.JobType.ValueType:
    """``card-analysis``, ``CARD_ANALYSIS`` or ``JOB_TYPE_CARD_ANALYSIS``."""
    name = text.strip().upper().replace("-", "_").removeprefix("JOB_TYPE_")
    try:
        value = pb.JobType.Value(f"JOB_TYPE_{name}")
    except ValueError:
        value = pb.JOB_TYPE_UNSPECIFIED
    if value == pb.JOB_TYPE_UNSPECIFIED:
        choices = ", ".join(
            n.removeprefix("JOB_TYPE_").lower().replace("_", "-")
            for n in (v.name for v in pb.JobType.DESCRIPTOR.values)
            if n != "JOB_TYPE_UNSPECIFIED"
        )
        raise argparse.ArgumentTypeError(f"unknown job type {text!r} (choose from {choices})")
    return value


def parse_status(text: str) -> pb.JobStatus.ValueType:
    """``failed``, ``FAILED`` or ``JOB_STATUS_FAILED``."""
    name = text.strip().upper().removeprefix("JOB_STATUS_")
    try:
        value = pb.JobStatus.Value(f"JOB_STATUS_{name}")
    except ValueError:
        value = pb.JOB_STATUS_UNSPECIFIED
    if value == pb.JOB_STATUS_UNSPECIFIED:
        choices = ", ".join(
            n.removeprefix("JOB_STATUS_").lower()
            for n in (v.name for v in pb.JobStatus.DESCRIPTOR.values)
            if n != "JOB_STATUS_UNSPECIFIED"
        )
        raise argparse.ArgumentTypeError(f"unknown status {text!r} (choose from {choices})")
    return value


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """A point in time: ``30m``/``1h``/``2d``/``1w`` ago, or an ISO date or time.

    An ISO time without an offset is local time.
    """
    now = now or datetime.now(UTC)
    match = _DURATION.match(text)
    if match:
        amount, unit = float(match.group(1)), match.group(2)
        return now - timedelta(**{_UNITS[unit]: amount})
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"cannot read time {text!r} (use e.g. 30m, 1h, 2d or 2026-11-29T10:00)"
        ) from None
    return value.astimezone(UTC) if value.tzinfo else value.astimezone().astimezone(UTC)


_DELAY_PART = re.compile(r"(\d+)([wdhms])")
_DELAY_SECONDS = {"w": 604_800, "d": 86_400, "h": 3_600, "m": 60, "s": 1}


def parse_delay(text: str) -> timedelta:
    """How long from now (``enqueue --in``): ``10m``, ``12h``, ``7d``, ``90s``, ``1w``,
    combinations such as ``1d12h``, or plain seconds; as JobService writes durations."""
    word = text.strip().lower()
    if re.fullmatch(r"\d+(?:\.\d+)?", word):
        return timedelta(seconds=float(word))
    if word and re.fullmatch(r"(?:\d+[wdhms])+", word):
        return timedelta(
            seconds=sum(int(n) * _DELAY_SECONDS[unit] for n, unit in _DELAY_PART.findall(word))
        )
    raise argparse.ArgumentTypeError(
        f"cannot read duration {text!r} (use e.g. 90s, 30m, 12h, 7d, 1d12h or seconds)"
    )


def parse_at(text: str) -> datetime:
    """A point in time (``enqueue --at``): RFC 3339, e.g. ``2026-12-24T18:00:00Z`` or
    ``2026-12-24T18:00:00+09:00`` (without an offset: local time)."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"cannot read time {text!r} (use RFC 3339, e.g. 2026-12-24T18:00:00Z)"
        ) from None
    return value.astimezone(UTC) if value.tzinfo else value.astimezone().astimezone(UTC)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def parse_priority(text: str) -> int:
    """A job's priority: 1 (most urgent) to 5 (least)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 1 <= value <= 5:
        raise argparse.ArgumentTypeError(f"must be 1 (most urgent) to 5 (least): {text!r}")
    return value


def format_age(seconds: float) -> str:
    """``3d 4h``, ``2h 5m``, ``4m 10s``, ``12s``."""
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"
