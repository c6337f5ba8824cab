"""The change feed's values: a change, the feed's state, and its cursors.

A cursor is `<feed_id>.<position>`: the feed (a random id made with the table, so a
cursor of another database is recognised, not misread) and the position of the
last change the reader has. A stream kept to one caller's jobs (a submitter's) is
given `<feed_id>~<sealed>` instead: the position sealed for that caller (AES-SIV
with the feed's key, the caller's name as associated data), so two of its cursors
do not tell how many changes other tenants made between them, and no other caller
can resume from it. Callers treat both as opaque; a cursor is short (at most
MAX_CURSOR_CHARS) so an application can store it in a plain column.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESSIV

from san_jobs.job_service.domain.model import TERMINAL_STATUSES, Job, JobStatus, JobType

MAX_CURSOR_CHARS = 128
_CURSOR = re.compile(r"([0-9a-f]{1,32})\.(0|[1-9][0-9]{0,18})")
# A sealed position: 8 bytes of position and AES-SIV's 16-byte tag, base64url.
_SEALED = re.compile(r"([0-9a-f]{1,32})~([A-Za-z0-9_-]{32})")
NOT_A_CURSOR = "not a cursor of this service (give one a change carried, or empty)"
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
    # The key (hex, 64 bytes) that seals a reader's cursors (migration 0020).
    cursor_key: str = ""

    def cursor(self, pos: int, reader: str | None = None) -> str:
        """The cursor after `pos`: plain, or sealed for `reader` (a stream kept to
        that caller's jobs)."""
        if reader is None:
            return f"{self.feed_id}.{pos}"
        sealed = self._cipher().encrypt(pos.to_bytes(8, "big"), [reader.encode()])
        return f"{self.feed_id}~{base64.urlsafe_b64encode(sealed).decode().rstrip('=')}"

    def oldest_cursor(self, reader: str | None = None) -> str:
        """Resuming after it reads every change kept (what an empty cursor means)."""
        return self.cursor(self.pruned_through, reader)

    def unseal(self, sealed: str, reader: str) -> int:
        """The position `sealed` (a Cursor's) holds for `reader`; ValueError
        (NOT_A_CURSOR) if it was not sealed by this feed for this reader."""
        try:
            data = base64.urlsafe_b64decode(sealed + "==")
            pos = int.from_bytes(self._cipher().decrypt(data, [reader.encode()]), "big")
        except (InvalidTag, ValueError):
            raise ValueError(NOT_A_CURSOR) from None
        if pos > _MAX_POSITION:
            raise ValueError(NOT_A_CURSOR)
        return pos

    def _cipher(self) -> AESSIV:
        if not self.cursor_key:
            raise RuntimeError("job_change_feed has no cursor_key: run the migrations (0020)")
        return AESSIV(bytes.fromhex(self.cursor_key))


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


@dataclass(frozen=True, slots=True)
class Cursor:
    """A cursor as given: its feed, and its position (plain) or sealed text."""

    feed_id: str
    pos: int | None = None
    sealed: str | None = None


def parse_cursor(text: str) -> Cursor:
    """A cursor's parts, unchecked against any feed; ValueError, in words
    (NOT_A_CURSOR), for anything that is not a cursor's shape."""
    if len(text) > MAX_CURSOR_CHARS:
        raise ValueError(NOT_A_CURSOR)
    sealed = _SEALED.fullmatch(text)
    if sealed is not None:
        return Cursor(sealed.group(1), sealed=sealed.group(2))
    match = _CURSOR.fullmatch(text)
    if match is None or int(match.group(2)) > _MAX_POSITION:
        raise ValueError(NOT_A_CURSOR)
    return Cursor(match.group(1), pos=int(match.group(2)))


def is_change(before: JobStatus | None, after: JobStatus) -> bool:
    """Whether a job's move from `before` (None: inserted) to `after` is a change of the
    feed: a status move into an end, or FAILED -> PENDING (RetryFailed). The SQL
    stores' trigger (migration 0013) holds the same rule in its WHEN; claims, lease
    renewals and retries are not changes."""
    if before is after or before is None:
        return False
    return after in TERMINAL_STATUSES or (before is JobStatus.FAILED and after is JobStatus.PENDING)
