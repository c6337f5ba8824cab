"""Input rules of every Enqueue request. Field names are the API's (proto) field
paths, so a client can point at the bad field; every violation is reported, not just
the first.

The rules of single fields (identifiers, free text, counts) are in field_rules.py; a
job type's input rules are named by its registry entry (job_types.py).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from san_jobs.job_service.domain.errors import FieldViolation
from san_jobs.job_service.domain.field_rules import (
    EnqueueLimits,
    check_count,
    check_free_text,
    check_identifier,
)
from san_jobs.job_service.domain.job_types import FROM_DEPENDENCIES, JOB_TYPES
from san_jobs.job_service.domain.limits import (
    MAX_ATTEMPTS_LIMIT,
    MAX_REQUEST_ID_CHARS,
    MAX_REQUESTED_BY_CHARS,
    MAX_SCHEDULE_AHEAD_SECONDS,
    MAX_TARGET_ID_CHARS,
)
from san_jobs.job_service.domain.model import JobDraft
from san_jobs.job_service.domain.schedules import PERIOD_REQUEST_ID_PREFIX

# The field rules are imported from here by the transport and tests; they are defined
# in field_rules.py (the job types' input rules use them, and this module uses those).
__all__ = [
    "EnqueueLimits",
    "check_count",
    "check_free_text",
    "check_identifier",
    "check_schedule",
    "validate_enqueue",
]

RESERVED_REQUEST_ID = (
    f"must not begin with {PERIOD_REQUEST_ID_PREFIX!r}: those are the request ids of"
    " schedules' periods, which JobService sets itself"
)

_MAX_SCHEDULE_AHEAD = timedelta(seconds=MAX_SCHEDULE_AHEAD_SECONDS)


def check_schedule(
    field: str, at: datetime | None, now: datetime, out: list[FieldViolation]
) -> datetime | None:
    """A delayed job's schedule time (`at`, None when not given) against the clock:
    at most MAX_SCHEDULE_AHEAD_SECONDS ahead of `now`, else a violation on `field`.
    Returns the time the job must wait for (NewJob.not_before): `at` while it is still
    ahead, None for a time already past (it means now) or none at all."""
    if at is None or at <= now:
        return None
    if at - now > _MAX_SCHEDULE_AHEAD:
        out.append(
            FieldViolation(
                field,
                f"must be at most {MAX_SCHEDULE_AHEAD_SECONDS // 86400} days ahead"
                f" (got {at.isoformat()}, {(at - now).days} days after now)",
            )
        )
        return None
    return at


def validate_enqueue(draft: JobDraft, limits: EnqueueLimits) -> list[FieldViolation]:
    """Every rule Enqueue enforces on `draft`'s fields but its schedule time, priority
    and dependencies' ids (the transport decodes and checks those); an empty list
    means the job may be stored. `draft.job_type` is None when the request's value
    was unspecified or unknown (the transport reports that violation itself)."""
    out: list[FieldViolation] = []
    check_identifier("target_id", draft.target_id, MAX_TARGET_ID_CHARS, out, required=True)
    # Optional and mostly empty (an empty one breaks no rule): checked only when given,
    # two calls fewer per BatchEnqueue item (issue 15).
    request_id = draft.request_id
    if request_id:
        check_identifier("request_id", request_id, MAX_REQUEST_ID_CHARS, out)
        if request_id.startswith(PERIOD_REQUEST_ID_PREFIX):
            # The periods' jobs are made by the firing loop, never through here.
            out.append(FieldViolation("request_id", RESERVED_REQUEST_ID))
    requested_by = draft.requested_by
    if requested_by:
        check_identifier("requested_by", requested_by, MAX_REQUESTED_BY_CHARS, out)
    if not 0 <= draft.max_attempts <= MAX_ATTEMPTS_LIMIT:
        out.append(
            FieldViolation(
                "max_attempts", f"must be between 1 and {MAX_ATTEMPTS_LIMIT} (0 means the default)"
            )
        )
    job_type = draft.job_type
    if job_type is None:
        return out
    spec = JOB_TYPES[job_type]
    expected = spec.input_field
    input_case = draft.input_field
    if input_case is None:
        out.append(FieldViolation(expected, f"is required for {job_type.value} jobs"))
    elif input_case != expected:
        out.append(
            FieldViolation(
                input_case, f"does not match job_type {job_type.value}; set {expected} instead"
            )
        )
    else:
        # With dependencies, their results may stand in for a TIL's notes or a
        # recall's sources (domain/dependencies.py): the check is told so.
        params = draft.request_params
        checked = {**params, FROM_DEPENDENCIES: True} if draft.depends_on else params
        spec.check_input(expected, checked, limits, out)
    return out
