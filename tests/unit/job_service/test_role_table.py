"""The role table (san_jobs.job_service.auth.roles) and the --auth setting, without a server."""

from __future__ import annotations

import pytest

from san_jobs.job_service.auth.bearer_tokens import (
    TOKEN_PREFIX,
    looks_like_token,
    new_token,
    token_hash,
)
from san_jobs.job_service.auth.roles import RPC_RULES, Access, Caller, Role, access, wants_every_job
from san_jobs.job_service.settings import JobServiceSettings
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb

SERVICE = pb.DESCRIPTOR.services_by_name["JobService"]


def test_every_rpc_of_the_proto_has_a_rule_for_every_role() -> None:
    assert set(RPC_RULES) == {method.name for method in SERVICE.methods}
    for rpc, rule in RPC_RULES.items():
        assert set(rule) == set(Role), rpc


def test_the_table_says_what_the_issue_says() -> None:
    allowed = {
        role: {rpc for rpc in RPC_RULES if access(rpc, role) is not Access.NONE} for role in Role
    }
    assert allowed[Role.OPERATOR] == set(RPC_RULES)
    assert allowed[Role.VIEWER] == {
        "GetJob",
        "StreamJobUpdates",
        "StreamJobChanges",
        "ListJobs",
        "GetJobStats",
        "GetUsage",
        "ListFailureGroups",
        # Schedules: a viewer reads every one, changes none.
        "GetSchedule",
        "ListSchedules",
    }
    assert allowed[Role.SUBMITTER] == {
        "Enqueue",
        "BatchEnqueue",
        "GetJob",
        "StreamJobUpdates",
        "StreamJobChanges",
        "ListJobs",
        "CancelJob",
        "GetUsage",
        "CreateSchedule",
        "GetSchedule",
        "ListSchedules",
        "DeleteSchedule",
        "PauseSchedule",
        "ResumeSchedule",
    }
    own = {rpc for rpc in RPC_RULES if access(rpc, Role.SUBMITTER) is Access.OWN}
    assert own == {
        "GetJob",
        "StreamJobUpdates",
        "StreamJobChanges",
        "ListJobs",
        "CancelJob",
        "GetUsage",
        "CreateSchedule",
        "GetSchedule",
        "ListSchedules",
        "DeleteSchedule",
        "PauseSchedule",
        "ResumeSchedule",
    }
    assert access("NoSuchRpc", Role.OPERATOR) is Access.NONE


def test_only_a_feed_wants_every_job() -> None:
    assert wants_every_job("StreamJobUpdates", pb.StreamJobUpdatesRequest())
    assert not wants_every_job("StreamJobUpdates", pb.StreamJobUpdatesRequest(job_ids=["x"]))
    assert not wants_every_job("ListJobs", pb.ListJobsRequest())


def test_a_caller_is_scoped_only_with_own_access() -> None:
    assert Caller("alice", Role.SUBMITTER, Access.OWN).owner == "alice"
    assert Caller("ops", Role.OPERATOR, Access.ALL).owner is None


def test_tokens_are_random_prefixed_and_hashed() -> None:
    first, second = new_token(), new_token()
    assert first != second and first.startswith(TOKEN_PREFIX)
    assert len(first) - len(TOKEN_PREFIX) >= 43  # 32 random bytes, base64url
    assert looks_like_token(first) and not looks_like_token("Basic abc")
    assert len(token_hash(first)) == 64 and token_hash(first) != token_hash(second)


@pytest.mark.parametrize(
    ("listen", "given", "resolved"),
    [
        ("127.0.0.1:50051", None, "off"),
        ("localhost:50051", None, "off"),
        ("[::1]:50051", None, "off"),
        ("0.0.0.0:50051", None, "token"),
        ("[::]:50051", None, "token"),
        ("10.1.2.3:50051", None, "token"),
        ("127.0.0.1:50051", "token", "token"),
        ("0.0.0.0:50051", "off", "off"),
    ],
)
def test_unset_auth_resolves_by_the_listen_address(
    monkeypatch: pytest.MonkeyPatch, listen: str, given: str | None, resolved: str
) -> None:
    monkeypatch.delenv("SAN_JOBS_AUTH", raising=False)
    settings = JobServiceSettings(listen=listen, **({"auth": given} if given else {}))  # type: ignore[arg-type]
    assert settings.auth == resolved
    assert settings.checks_tokens() is (resolved == "token")
