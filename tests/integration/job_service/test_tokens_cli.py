"""`job-service tokens create|list|revoke` through the real command (a subprocess), on
SQLite and PostgreSQL, against a real JobService under --auth token on that database."""

from __future__ import annotations

import asyncio
import hashlib
from datetime import UTC, datetime, timedelta

import grpc
import pytest

from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from tests.integration.job_service.conftest import StartService
from tests.support.processes import BIN


async def tokens(database_url: str, *args: str) -> tuple[int, str, str]:
    """Run `job-service tokens ARGS --database-url URL`: exit code, stdout, stderr."""
    process = await asyncio.create_subprocess_exec(
        str(BIN / "job-service"),
        "tokens",
        *args,
        "--database-url",
        database_url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_create_list_revoke_through_the_command(
    database_url: str, start_service: StartService
) -> None:
    code, out, err = await tokens(database_url, "create", "web-1", "--role", "submitter")
    assert code == 0, err
    token = out.strip()
    assert out.count("\n") == 1 and token.startswith("sjt_")  # stdout: the token alone
    assert "shown only now" in err and token not in err

    service = await start_service(auth="token")
    md = (("authorization", f"Bearer {token}"),)
    request = pb.EnqueueRequest(
        job_type=pb.JOB_TYPE_CARD_ANALYSIS,
        target_id="cli",
        card_analysis_input=pb.CardAnalysisInput(text="some text to summarise"),
    )
    job = (await service.stub.Enqueue(request, metadata=md, timeout=10)).job
    assert job.requested_by == "web-1"

    code, out, err = await tokens(database_url, "list")
    assert code == 0, err
    header, row = out.strip().splitlines()
    assert header.split() == ["NAME", "ROLE", "CREATED", "REVOKED", "EXPIRES"]
    assert row.split()[:2] == ["web-1", "submitter"] and row.split()[3:] == ["-", "-"]
    assert token not in out and hashlib.sha256(token.encode()).hexdigest() not in out

    code, out, err = await tokens(database_url, "create", "web-1", "--role", "viewer")
    assert code == 1 and "live token named 'web-1'" in err

    code, out, err = await tokens(database_url, "revoke", "web-1")
    assert code == 0, err
    code, out, err = await tokens(database_url, "revoke", "web-1")
    assert code == 1 and "no live token named 'web-1'" in err
    code, out, _ = await tokens(database_url, "list")
    assert out.strip().splitlines()[1].split()[3] != "-"  # the time it was revoked

    # The server refuses it within its cache time (2 s); poll, bounded.
    for _ in range(100):
        try:
            await service.stub.GetJob(pb.GetJobRequest(job_id=job.id), metadata=md, timeout=10)
        except grpc.aio.AioRpcError as error:
            assert error.code() is grpc.StatusCode.UNAUTHENTICATED
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail("a revoked token was still accepted after 10 s")

    # The name can be given a new token (rotation), same identity.
    code, out, err = await tokens(database_url, "create", "web-1", "--role", "submitter")
    assert code == 0 and out.strip() != token, err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["create", "x", "--role", "admin"], "invalid choice: 'admin'"),
        (["create", "bad name", "--role", "viewer"], "1 to 128 characters"),
        (["create", "x"], "--role"),
        (["create", "x", "--role", "viewer", "--expires-in", "soon"], "expected a duration"),
        (["create", "x", "--role", "viewer", "--expires-in", "0"], "above 0, or never"),
    ],
)
async def test_bad_usage_is_exit_2(database_url: str, args: list[str], message: str) -> None:
    code, _, err = await tokens(database_url, *args)
    assert code == 2 and message in err


async def test_a_token_made_with_an_expiry_lists_it_and_stops_working_then(
    database_url: str, start_service: StartService
) -> None:
    made = datetime.now(UTC)
    code, out, err = await tokens(
        database_url, "create", "ci", "--role", "viewer", "--expires-in", "3s"
    )
    assert code == 0, err
    token = out.strip()
    assert "expires " in err
    code, out, err = await tokens(
        database_url, "create", "web-2", "--role", "submitter", "--expires-in", "90d"
    )
    assert code == 0, err

    code, out, err = await tokens(database_url, "list")
    assert code == 0, err
    expires = {line.split()[0]: line.split()[4] for line in out.strip().splitlines()[1:]}
    in_90_days = datetime.strptime(expires["web-2"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert abs(in_90_days - (made + timedelta(days=90))) < timedelta(minutes=5)
    assert expires["ci"] != "-"

    service = await start_service(auth="token")
    md = (("authorization", f"Bearer {token}"),)
    stats = pb.GetJobStatsRequest()
    expiry = datetime.strptime(expires["ci"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    if datetime.now(UTC) < expiry - timedelta(seconds=0.5):  # a slow machine may be past it
        await service.stub.GetJobStats(stats, metadata=md, timeout=10)
    # Refused once it has expired; poll, bounded.
    for _ in range(100):
        try:
            await service.stub.GetJobStats(stats, metadata=md, timeout=10)
        except grpc.aio.AioRpcError as error:
            assert error.code() is grpc.StatusCode.UNAUTHENTICATED
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail("an expired token was still accepted 10 s after it was made")
    assert datetime.now(UTC) >= expiry - timedelta(seconds=1)  # not refused before its time
