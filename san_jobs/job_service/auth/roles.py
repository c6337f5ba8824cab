"""The role table: for every JobService RPC, what each role may do. The one place
where access is decided (the interceptor reads it); a test holds it against the
service descriptor, so a new RPC cannot be served without a rule.

    RPC               submitter          viewer       operator
    Enqueue           yes                no           yes
    BatchEnqueue      yes                no           yes
    GetJob            own jobs           yes          yes
    StreamJobUpdates  own jobs, by id    yes (feed)   yes
    StreamJobChanges  own jobs' changes  yes          yes
    ListJobs          own jobs           yes          yes
    CancelJob         own jobs           no           yes
    RetryFailed       no                 no           yes
    GetJobStats       no                 yes          yes
    GetUsage          own jobs           yes          yes
    PruneJobs         no                 no           yes
    ListFailureGroups no                 yes          yes
    CreateSchedule    yes (its own)      no           yes
    GetSchedule       own schedules      yes          yes
    ListSchedules     own schedules      yes          yes
    DeleteSchedule    own schedules      no           yes
    PauseSchedule     own schedules      no           yes
    ResumeSchedule    own schedules      no           yes

A schedule is "own" when the caller created it (its tenant is the caller's name); a
viewer reads every schedule, as it reads every job, and changes none.

"Own" jobs are those whose requested_by is the caller's name (its token's, or under
--auth off its listed client certificate's); another's job is NOT_FOUND to a
submitter (so ids cannot be probed), never PERMISSION_DENIED.
"""

from __future__ import annotations

import enum
from contextvars import ContextVar
from dataclasses import dataclass


class Role(enum.StrEnum):
    """The roles a token can have; the values are stored in api_tokens.role."""

    SUBMITTER = "submitter"
    VIEWER = "viewer"
    OPERATOR = "operator"


class Access(enum.Enum):
    """What one role may do with one RPC."""

    NONE = "none"  # PERMISSION_DENIED
    OWN = "own"  # only jobs it requested (StreamJobUpdates: by id only, no live feed)
    ALL = "all"


_S, _V, _O = Role.SUBMITTER, Role.VIEWER, Role.OPERATOR
_N, _OWN, _ALL = Access.NONE, Access.OWN, Access.ALL

# RPC (method name of san.jobs.v1.JobService) -> role -> access.
RPC_RULES: dict[str, dict[Role, Access]] = {
    "Enqueue": {_S: _ALL, _V: _N, _O: _ALL},
    "BatchEnqueue": {_S: _ALL, _V: _N, _O: _ALL},
    "GetJob": {_S: _OWN, _V: _ALL, _O: _ALL},
    "StreamJobUpdates": {_S: _OWN, _V: _ALL, _O: _ALL},
    "StreamJobChanges": {_S: _OWN, _V: _ALL, _O: _ALL},
    "ListJobs": {_S: _OWN, _V: _ALL, _O: _ALL},
    "CancelJob": {_S: _OWN, _V: _N, _O: _ALL},
    "RetryFailed": {_S: _N, _V: _N, _O: _ALL},
    "GetJobStats": {_S: _N, _V: _ALL, _O: _ALL},
    "GetUsage": {_S: _OWN, _V: _ALL, _O: _ALL},
    "PruneJobs": {_S: _N, _V: _N, _O: _ALL},
    "ListFailureGroups": {_S: _N, _V: _ALL, _O: _ALL},
    "CreateSchedule": {_S: _OWN, _V: _N, _O: _ALL},
    "GetSchedule": {_S: _OWN, _V: _ALL, _O: _ALL},
    "ListSchedules": {_S: _OWN, _V: _ALL, _O: _ALL},
    "DeleteSchedule": {_S: _OWN, _V: _N, _O: _ALL},
    "PauseSchedule": {_S: _OWN, _V: _N, _O: _ALL},
    "ResumeSchedule": {_S: _OWN, _V: _N, _O: _ALL},
}

# Services besides JobService that need a token of any role (server reflection: the
# schema is public, but the issue exempts only health, and a stranger needs no map).
ANY_ROLE_SERVICES = frozenset({"grpc.reflection.v1alpha.ServerReflection"})
# Services anyone may call: load balancers and orchestrators probe health without a token.
OPEN_SERVICES = frozenset({"grpc.health.v1.Health"})


def access(rpc: str, role: Role) -> Access:
    """What `role` may do with `rpc` (a method name); NONE for an RPC not in the table."""
    return RPC_RULES.get(rpc, {}).get(role, Access.NONE)


@dataclass(frozen=True, slots=True)
class Caller:
    """The authenticated caller of the current RPC."""

    name: str
    role: Role
    scope: Access

    @property
    def owner(self) -> str | None:
        """The requested_by every job this call touches must have; None: any job."""
        return self.name if self.scope is Access.OWN else None


# Set by the interceptor for the handler of each call (None under --auth off without
# --tls-client-roles).
current_caller: ContextVar[Caller | None] = ContextVar("current_caller", default=None)


def wants_every_job(rpc: str, request: object) -> bool:
    """A request that reaches every caller's jobs by its nature, so OWN access is not
    enough for it: StreamJobUpdates without job ids (the live feed)."""
    return rpc == "StreamJobUpdates" and not getattr(request, "job_ids", None)
