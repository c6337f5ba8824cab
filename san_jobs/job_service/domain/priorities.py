"""Priorities (EnqueueRequest.priority) and the rule that keeps them from starving
anyone (README, "Priorities").

A job's priority is 1 (most urgent) to 5 (least); the request's 0 means the default,
3. Among due jobs a claim takes the most urgent first (oldest due first within a
level). So that no job waits forever behind a steady stream of more urgent ones, a
fixed share of the claimed jobs is taken by age alone: `AgeShare` decides, claim by
claim, whether the next claim takes the longest-waiting due jobs whatever their
priority. The same rule orders the worker's own queue of jobs claimed ahead
(worker/executor.py), so the jobs claimed ahead cannot starve either.

Why a share rather than aging (priority improving with the wait): a share keeps each
claim one ordered range scan of an index ((priority, due_at) or due_at), while an
aged priority is a computed order no index holds, so every claim would sort the
whole backlog.
"""

from __future__ import annotations

from dataclasses import dataclass

MOST_URGENT = 1
LEAST_URGENT = 5
# What a request's 0 (unset) means.
DEFAULT_PRIORITY = 3
# One claimed job in AGE_SHARE, at least, is taken by age alone.
AGE_SHARE = 10


@dataclass(frozen=True, slots=True)
class UrgentPriorities:
    """Who may use the most urgent priorities (--submitter-most-urgent-priority,
    --urgent-callers): under authentication a submitter's job more urgent than
    `most_urgent_for_submitters` is refused, naming `priority`, unless the caller is
    one of `callers`; operators may use any. Otherwise every submitter could mark
    all of its work 1 and go ahead of every other tenant's (the age share still
    serves the others, but only a tenth of the claims). 1 (the default): no bound.
    At most DEFAULT_PRIORITY, so that a request with no priority is always taken."""

    most_urgent_for_submitters: int = MOST_URGENT
    callers: frozenset[str] = frozenset()

    def problem(self, priority: int, caller: str, submitter: bool) -> str | None:
        """Why `caller` (a submitter or not) may not enqueue at `priority` (stored
        value, 1 to 5), or None."""
        bound = self.most_urgent_for_submitters
        if not submitter or priority >= bound or caller in self.callers:
            return None
        return (
            f"priority {priority} is reserved; this caller may use {bound} (most urgent)"
            f" to {LEAST_URGENT}"
        )


def effective_priority(requested: int) -> int:
    """The stored priority for a request's value (already checked to be 0..5)."""
    return requested or DEFAULT_PRIORITY


class AgeShare:
    """Counts claimed jobs, and says when the next claim is to be taken by age.

    The rule: a claim is taken by age (oldest due first, whatever the priority) when,
    before it, fewer than one in AGE_SHARE of the jobs claimed so far were taken by
    age; otherwise by priority (most urgent first, oldest due first within a level).
    So after every claim, the jobs taken by age are at least a tenth of all the jobs
    claimed, less one claim's worth: under any stream of urgent jobs the oldest due
    jobs still get a tenth of the claimed jobs (with claims of one job, every tenth
    claim)."""

    __slots__ = ("by_age", "claimed")

    def __init__(self) -> None:
        self.claimed = 0
        self.by_age = 0

    def next_by_age(self) -> bool:
        return self.by_age * AGE_SHARE < self.claimed

    def took(self, jobs: int, by_age: bool) -> None:
        """A claim took `jobs` jobs, by age or by priority."""
        self.claimed += jobs
        if by_age:
            self.by_age += jobs
