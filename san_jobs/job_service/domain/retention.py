"""Retention: how long terminal jobs are kept before the pruner deletes them.

A terminal job's age is measured from its end: `updated_at`, which the complete, fail
and cancel transitions set to the same instant as completed_at, failed_at or
cancelled_at, and which nothing changes afterwards (a retried FAILED job is PENDING
again, so no longer terminal). One column for the three statuses lets one index
serve every prune (storage/tables.py, ix_async_jobs_terminal_end).

Durations are written as operators write them elsewhere (Prometheus, Go, systemd):
`7d`, `12h`, `30m`, `45s`, `1w`, combinations such as `1d12h`, or plain seconds
(`3600`, `0.5`). `off` (also `0`, `never`, `forever`) keeps jobs of that status
forever: a zero retention would delete results before anyone could read them, so
0 is not "delete at once".
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from san_jobs.job_service.domain.model import JobStatus

# The statuses the pruner deletes, in the order reports list them.
PRUNABLE_STATUSES: tuple[JobStatus, ...] = (
    JobStatus.COMPLETED,
    JobStatus.FAILED,
    JobStatus.CANCELLED,
)

KEEP_FOREVER_WORDS = frozenset({"off", "0", "never", "forever"})

_UNIT_SECONDS = {"w": 604_800.0, "d": 86_400.0, "h": 3_600.0, "m": 60.0, "s": 1.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)([wdhms])")
_WHOLE = re.compile(r"(?:\d+(?:\.\d+)?[wdhms])+")
# A hundred years: longer is a typo (use off), and the cutoff must stay a valid date.
_MAX_SECONDS = 100 * 365 * 86_400.0


def parse_retention(text: str) -> float | None:
    """Seconds of a retention written as `7d`, `12h`, `30m`, `1d12h` or plain seconds;
    None for `off` (keep forever, also `0`, `never`, `forever`). ValueError, one line,
    for anything else."""
    word = str(text).strip().lower()
    if word in KEEP_FOREVER_WORDS:
        return None
    seconds: float
    if _WHOLE.fullmatch(word):
        seconds = sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _PART.findall(word))
    else:
        try:
            seconds = float(word)
        except ValueError:
            raise ValueError(
                f"expected a duration such as 7d, 12h, 30m, 90s or seconds, or off; got {text!r}"
            ) from None
    if not math.isfinite(seconds) or seconds < 0 or seconds > _MAX_SECONDS:
        raise ValueError(f"expected a duration from 1s to 100 years (36500d), or off; got {text!r}")
    if seconds == 0:
        return None  # "0s", "0.0": the same as 0
    return seconds


def format_retention(seconds: float | None) -> str:
    """A retention as the flags write it: `7d`, `36h`, `90s`, `off`."""
    if seconds is None:
        return "off"
    for unit in ("w", "d", "h", "m"):
        size = _UNIT_SECONDS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """How long each terminal status is kept, in seconds; None: forever."""

    completed: float | None = 7 * 86_400.0
    failed: float | None = 30 * 86_400.0
    cancelled: float | None = 30 * 86_400.0

    def by_status(self) -> dict[JobStatus, float | None]:
        return {
            JobStatus.COMPLETED: self.completed,
            JobStatus.FAILED: self.failed,
            JobStatus.CANCELLED: self.cancelled,
        }

    def cutoffs(self, now: datetime) -> dict[JobStatus, datetime]:
        """For each status that is not kept forever: jobs that ended before this time
        are past retention."""
        return {
            status: now - timedelta(seconds=seconds)
            for status, seconds in self.by_status().items()
            if seconds is not None
        }

    @property
    def prunes_anything(self) -> bool:
        return any(seconds is not None for seconds in self.by_status().values())


@dataclass(frozen=True, slots=True)
class PruneCount:
    """What a prune (or its dry run) found for one terminal status."""

    status: JobStatus
    # None: the status is kept forever (nothing is counted or deleted).
    retention_seconds: float | None
    cutoff: datetime | None
    # Deleted, or past retention in a dry run (at most the count cap; see `more`).
    count: int
    # Dry run only: more than `count` jobs are past retention.
    more: bool = False


def report_counts(
    policy: RetentionPolicy,
    cutoffs: Mapping[JobStatus, datetime],
    counts: Mapping[JobStatus, int],
    cap: int | None = None,
) -> tuple[PruneCount, ...]:
    """One PruneCount per prunable status, in PRUNABLE_STATUSES order. With `cap` (a
    dry run), a count at the cap means there may be more."""
    retention = policy.by_status()
    return tuple(
        PruneCount(
            status=status,
            retention_seconds=retention[status],
            cutoff=cutoffs.get(status),
            count=min(counts.get(status, 0), cap) if cap is not None else counts.get(status, 0),
            more=cap is not None and counts.get(status, 0) > cap,
        )
        for status in PRUNABLE_STATUSES
    )
