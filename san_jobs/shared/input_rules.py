"""Rules on job inputs that JobService checks at Enqueue and AiGateway checks again
at the call: declared once, so the two can never disagree about what a valid input is.
JobService's field checks (job_service/domain/job_types.py) and AiGateway's request
checks (each kind's validation, ai_gateway/kinds/) both read them; each words its own
messages."""

from __future__ import annotations

import datetime
import re

# RECALL_GENERATION's question_count: 0 means the default.
DEFAULT_QUESTION_COUNT = 5
MAX_QUESTION_COUNT = 20

# A recall source's key terms (RecallSource.key_terms, a card's tags): how many, and
# how long each.
MAX_KEY_TERMS = 20
MAX_KEY_TERM_CHARS = 100


def usable_key_terms(values: object) -> list[str]:
    """A card's tags (whatever a result or a column holds) as a recall source's key
    terms within the bounds above: strings, not blank, no NUL, each cut to
    MAX_KEY_TERM_CHARS, the first MAX_KEY_TERMS."""
    if not isinstance(values, list):
        return []
    terms = [
        v[:MAX_KEY_TERM_CHARS]
        for v in values
        if isinstance(v, str) and v.strip() and "\x00" not in v
    ]
    return terms[:MAX_KEY_TERMS]


# A TIL day is YYYY-MM-DD in ASCII digits (a regex `\d` would admit other scripts').
DAY_CHARS = 10
_DAY_FORMAT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


def day_problem(day: str) -> str | None:
    """Why `day` is not a TIL day, or None: "format" (not YYYY-MM-DD) or "date" (the
    right shape, but no such date, as 2026-02-30)."""
    if len(day) != DAY_CHARS or not _DAY_FORMAT.fullmatch(day):
        return "format"
    try:
        datetime.date.fromisoformat(day)
    except ValueError:
        return "date"
    return None
