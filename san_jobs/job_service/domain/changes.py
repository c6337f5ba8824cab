"""The change feed's values: a change, the feed's state, and its cursors.

A cursor is `<feed_id>.<position>`: the feed (a random id made with the table, so a
cursor of another database is recognised, not misread) and the position of the
last change the reader has. Callers treat it as opaque; it is short (at most
MAX_CURSOR_CHARS) so an application can store it in a plain column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from san_jobs.job_service.domain.model import Job, JobStatus, JobType

MAX_CURSOR_CHARS = 128
_CURSOR = re.compile(r"([0-9a-f]{1,32})\.(0|[1-9][0-9]{0,18})")
# Positions are BIGINT: a cursor beyond it is not one of ours.
_MAX_POSITION = 2**63 - 1


@dataclass(frozen=True, slots=True)
class FeedState:
    """The feed as the database holds it now."""

    feed_id: str
    # The last position given (0: none yet).
    last_pos: int
    # The last position retention deleted: changes after it are kept.
    pruned_through: int

    def cursor(self, pos: int) -> str:
        return f"{self.feed_id}.{pos}"

    @property
    def oldest_cursor(self) -> str:
        """Resuming after it reads every change kept (what an empty cursor means)."""
        return self.cursor(self.pruned_through)


@dataclass(frozen=True, slots=True)
class JobChange:
    """One change: its position and the job right after it (request_params empty:
    the feed keeps no inputs)."""

    pos: int
    job: Job


@dataclass(frozen=True, slots=True)
class ChangeFilter:
    """Which changes a reader wants (empty tuples: all); `requested_by`: only that
    caller's jobs (a submitter's own)."""

    job_types: tuple[JobType, ...] = ()
    statuses: tuple[JobStatus, ...] = ()
    requested_by: str | None = None

    def matches(self, job: Job) -> bool:
        return (
            (not self.job_types or job.job_type in self.job_types)
            and (not self.statuses or job.status in self.statuses)
            and (self.requested_by is None or job.requested_by == self.requested_by)
        )


def parse_cursor(text: str) -> tuple[str, int]:
    """(feed_id, position) of a cursor; ValueError, in words, for anything else."""
    match = _CURSOR.fullmatch(text) if len(text) <= MAX_CURSOR_CHARS else None
    if match is None or int(match.group(2)) > _MAX_POSITION:
        raise ValueError("not a cursor of this service (give one a change carried, or empty)")
    return match.group(1), int(match.group(2))
