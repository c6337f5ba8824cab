"""ListJobs page tokens: where the previous page ended, (created_at, id) of its last
job, as URL-safe base64 of a two-item JSON list. Opaque to callers.

A token comes back from the caller, so decoding trusts nothing: anything but a token
this module could have made is INVALID_ARGUMENT on `page_token`, never an error from
deeper down (a datetime that overflows in UTC, a nested or huge JSON document, a
job id the database cannot compare).
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from datetime import UTC, datetime

from san_jobs.job_service.domain.errors import FieldViolation, InvalidRequestError
from san_jobs.job_service.domain.limits import MAX_PAGE_TOKEN_CHARS

FIELD = "page_token"
# base64url's alphabet; padding is left off by encode() but accepted.
_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=")


def encode_page_token(created_at: datetime, job_id: str) -> str:
    """The token of the page that starts after the job (created_at, job_id)."""
    raw = json.dumps([created_at.isoformat(), job_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _malformed(why: str) -> InvalidRequestError:
    return InvalidRequestError(
        [FieldViolation(FIELD, f"malformed page token ({why}); pass one from a previous page")]
    )


def decode_page_token(token: str) -> tuple[datetime, str]:
    """(created_at in UTC, job id) of a token made by `encode_page_token`; anything
    else raises InvalidRequestError on field `page_token`."""
    # Checked before decoding, so a huge or odd token costs nothing and is not echoed.
    if len(token) > MAX_PAGE_TOKEN_CHARS:
        raise _malformed(f"longer than {MAX_PAGE_TOKEN_CHARS} characters")
    if not _ALPHABET.issuperset(token):
        raise _malformed("not base64url")
    try:
        padded = token + "=" * (-len(token) % 4)
        value = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
    except (ValueError, binascii.Error, RecursionError):
        # ValueError covers invalid JSON and invalid UTF-8 (UnicodeDecodeError).
        raise _malformed("not base64url JSON") from None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(item, str) for item in value)
    ):
        raise _malformed("not a position")
    created, job_id = value
    try:
        moment = datetime.fromisoformat(created)
        if moment.tzinfo is None:
            raise ValueError("no time zone")
        # Year 1 at +14:00 is year 0 in UTC: OverflowError.
        moment = moment.astimezone(UTC)
        canonical_id = str(uuid.UUID(job_id))
    except (ValueError, OverflowError):
        raise _malformed("not a position") from None
    if canonical_id != job_id:
        raise _malformed("not a position")
    return moment, job_id
