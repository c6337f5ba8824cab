"""The rules of single fields, shared by every request's checks. Field names are the
API's (proto) field paths, so a client can point at the bad field.

Two kinds of strings: identifier-like ones (ids, target_id, request_id,
requested_by, page_token, url) refuse every control character; free text refuses
only NUL, which PostgreSQL cannot store in text. Bounds live in limits.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from san_jobs.job_service.domain.errors import FieldViolation
from san_jobs.job_service.domain.limits import DEFAULT_MAX_TEXT_CHARS
from san_jobs.shared.safe_text import FORMAT_CHARACTERS

# C0 and C1 control characters (Unicode category Cc) and format characters (Cf): an
# invisible U+202E RIGHT-TO-LEFT OVERRIDE in a target id makes what follows read
# backwards wherever the id is shown, and an id is never free text.
_CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f{FORMAT_CHARACTERS}]")


@dataclass(frozen=True, slots=True)
class EnqueueLimits:
    """Limits an operator may tune (`--max-text-chars`)."""

    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS


def _too_long(length: int, max_chars: int) -> str:
    return f"is {length} characters long; at most {max_chars} allowed"


def check_identifier(
    field: str, value: str, max_chars: int, out: list[FieldViolation], *, required: bool = False
) -> bool:
    """Rules of an identifier-like string: at most `max_chars`, no control character,
    and not blank when `required`. Appends violations to `out`; True when none."""
    if len(value) > max_chars:
        out.append(FieldViolation(field, _too_long(len(value), max_chars)))
        return False
    match = _CONTROL.search(value)
    if match is not None:
        out.append(
            FieldViolation(
                field,
                "must not contain control or format characters "
                f"(found U+{ord(match.group()):04X} "
                f"at index {match.start()})",
            )
        )
        return False
    if required and not value.strip():
        out.append(FieldViolation(field, "is required and must not be blank"))
        return False
    return True


def check_free_text(
    field: str, value: str, max_chars: int, out: list[FieldViolation], *, required: bool = False
) -> bool:
    """Rules of a free-text string: at most `max_chars`, no NUL, and not blank when
    `required`. Appends violations to `out`; True when none."""
    if len(value) > max_chars:
        out.append(FieldViolation(field, _too_long(len(value), max_chars)))
        return False
    nul = value.find("\x00")
    if nul >= 0:
        out.append(FieldViolation(field, f"must not contain NUL characters (found at index {nul})"))
        return False
    if required and not value.strip():
        out.append(FieldViolation(field, "is required and must not be blank"))
        return False
    return True


def check_count(field: str, count: int, max_count: int, out: list[FieldViolation]) -> bool:
    """At most `max_count` items in a repeated field."""
    if count > max_count:
        out.append(FieldViolation(field, f"holds {count} items; at most {max_count} allowed"))
        return False
    return True
