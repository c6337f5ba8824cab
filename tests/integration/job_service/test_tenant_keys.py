"""A tenant's keys are its own (issue 22, point 2), end to end over gRPC on a real
in-process JobService under --auth token (SQLite and PostgreSQL): request_id and the
active (job_type, target_id) are scoped to the authenticated caller, for Enqueue,
BatchEnqueue and RetryFailed's active-slot check; no answer, error or detail names
another caller's job. Under --auth off nothing changes (one tenant)."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

import grpc
import pytest

from san_jobs.job_service.auth.roles import Role
from san_jobs.proto.jobs.v1 import job_service_pb2 as pb
from tests.integration.job_service.conftest import Service, StartService
from tests.integration.job_service.scripted_gateway import Fail, Hang
from tests.integration.job_service.test_auth_roles import Metadata, add_token, bearer
from tests.support.jobs_api import SAMPLE_TEXT, card_request
from tests.support.rich_errors import rich_error, status_error

REJECT = pb.ON_DUPLICATE_REJECT
RETURN = pb.ON_DUPLICATE_RETURN_EXISTING
TERMINAL = {pb.JOB_STATUS_COMPLETED, pb.JOB_STATUS_FAILED, pb.JOB_STATUS_CANCELLED}


@dataclass
class Tenants:
    service: Service
    tokens: dict[str, str]

    def as_(self, name: str) -> Metadata:
        return bearer(self.tokens[name])

    async def enqueue(self, name: str, request: pb.EnqueueRequest) -> pb.EnqueueResponse:
        return await self.service.stub.Enqueue(request, metadata=self.as_(name), timeout=10)

    async def batch(self, name: str, *requests: pb.EnqueueRequest) -> pb.BatchEnqueueResponse:
        return await self.service.stub.BatchEnqueue(
            pb.BatchEnqueueRequest(requests=requests), metadata=self.as_(name), timeout=10
        )

    async def refused(self, name: str, request: pb.EnqueueRequest) -> grpc.aio.AioRpcError:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await self.enqueue(name, request)
        return refused.value


@pytest.fixture
async def tenants(start_service: StartService) -> Tenants:
    service = await start_service(auth="token", workers=2)
    service.gateway.script = lambda _job, _attempt: Hang()  # jobs stay active
    tokens = {
        "alice-svc": await add_token(service, "alice-svc", Role.SUBMITTER),
        "bob": await add_token(service, "bob", Role.SUBMITTER),
        "operator": await add_token(service, "operator", Role.OPERATOR),
    }
    return Tenants(service, tokens)


def _target() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


async def _terminal(t: Tenants, name: str, job_id: str) -> pb.Job:
    """The job once terminal, read as `name` (GetJob until then)."""
    for _ in range(400):
        job = (
            await t.service.stub.GetJob(
                pb.GetJobRequest(job_id=job_id), metadata=t.as_(name), timeout=10
            )
        ).job
        if job.status in TERMINAL:
            return job
        await asyncio.sleep(0.05)
    raise AssertionError(f"job {job_id} not terminal within 20 s")


async def _completed(t: Tenants, name: str, request: pb.EnqueueRequest) -> pb.Job:
    t.service.gateway.script = lambda _job, _attempt: None  # answer normally
    job = await _terminal(t, name, (await t.enqueue(name, request)).job.id)
    t.service.gateway.script = lambda _job, _attempt: Hang()
    assert job.status == pb.JOB_STATUS_COMPLETED
    return job


async def test_another_tenants_request_id_makes_a_job_of_ones_own(tenants: Tenants) -> None:
    alice = await _completed(
        tenants, "alice-svc", card_request(_target(), SAMPLE_TEXT, request_id="rid-shared")
    )
    got = await tenants.enqueue(
        "bob", card_request(_target(), SAMPLE_TEXT, request_id="rid-shared")
    )
    assert not got.deduplicated
    assert got.job.id != alice.id and got.job.requested_by == "bob"
    assert got.job.status == pb.JOB_STATUS_PENDING and not got.job.HasField("card_analysis_result")
    # Each resends its key and gets its own job back.
    again = await tenants.enqueue(
        "bob", card_request(_target(), SAMPLE_TEXT, request_id="rid-shared")
    )
    assert again.deduplicated and again.job.id == got.job.id
    hers = await tenants.enqueue(
        "alice-svc", card_request(_target(), SAMPLE_TEXT, request_id="rid-shared")
    )
    assert hers.deduplicated and hers.job.id == alice.id
    # BatchEnqueue alike.
    batch = await tenants.batch(
        "bob", card_request(_target(), SAMPLE_TEXT, request_id="rid-shared")
    )
    (result,) = batch.results
    assert result.response.deduplicated and result.response.job.id == got.job.id


async def test_another_tenants_active_target_is_not_a_duplicate(tenants: Tenants) -> None:
    target = _target()
    alice = (await tenants.enqueue("alice-svc", card_request(target, SAMPLE_TEXT))).job
    bob = await tenants.enqueue("bob", card_request(target, SAMPLE_TEXT, on_duplicate=RETURN))
    assert not bob.deduplicated and bob.job.id != alice.id and bob.job.requested_by == "bob"
    assert bob.job.attempt_count == 0
    # Bob's own duplicate: the error names bob's job, and only it.
    error = await tenants.refused("bob", card_request(target, SAMPLE_TEXT))
    rich = rich_error(error)
    assert rich.code == grpc.StatusCode.ALREADY_EXISTS
    assert rich.metadata == {"existingJobId": bob.job.id}
    assert alice.id not in (error.details() or "")
    assert alice.id.encode() not in b"".join(
        v if isinstance(v, bytes) else v.encode() for _, v in error.trailing_metadata() or ()
    )
    # Alice's target stays hers.
    error = await tenants.refused("alice-svc", card_request(target, SAMPLE_TEXT))
    assert rich_error(error).metadata == {"existingJobId": alice.id}


async def test_batch_enqueue_keys_are_the_callers(tenants: Tenants) -> None:
    target, other = _target(), _target()
    alice = (
        await tenants.enqueue("alice-svc", card_request(target, SAMPLE_TEXT, request_id="rid-b"))
    ).job
    answer = await tenants.batch(
        "bob",
        card_request(target, SAMPLE_TEXT, on_duplicate=RETURN),
        card_request(other, SAMPLE_TEXT, request_id="rid-b"),
        card_request(target, SAMPLE_TEXT),  # repeats bob's first item
    )
    first, second, third = answer.results
    assert not first.response.deduplicated and first.response.job.requested_by == "bob"
    assert not second.response.deduplicated and second.response.job.requested_by == "bob"
    duplicate = status_error(third.error)
    assert duplicate.code == grpc.StatusCode.ALREADY_EXISTS
    assert duplicate.metadata == {"existingJobId": first.response.job.id}
    assert alice.id.encode() not in answer.SerializeToString()


async def test_taking_a_key_first_blocks_no_one_else(tenants: Tenants) -> None:
    # Bob takes alice's target and request id before she does.
    target = _target()
    await tenants.enqueue("bob", card_request(target, SAMPLE_TEXT, request_id="rid-first"))
    hers = await tenants.enqueue(
        "alice-svc", card_request(target, SAMPLE_TEXT, request_id="rid-first")
    )
    assert not hers.deduplicated and hers.job.requested_by == "alice-svc"
    got = await tenants.service.stub.GetJob(
        pb.GetJobRequest(job_id=hers.job.id), metadata=tenants.as_("alice-svc"), timeout=10
    )
    assert got.job.id == hers.job.id
    batch = await tenants.batch(
        "alice-svc", card_request(_target(), SAMPLE_TEXT, request_id="rid-first")
    )
    (result,) = batch.results
    assert result.response.deduplicated and result.response.job.id == hers.job.id


async def test_an_operator_enqueues_in_its_own_tenant(tenants: Tenants) -> None:
    target = _target()
    alice = (await tenants.enqueue("alice-svc", card_request(target, SAMPLE_TEXT))).job
    mine = await tenants.enqueue("operator", card_request(target, SAMPLE_TEXT, on_duplicate=RETURN))
    assert not mine.deduplicated and mine.job.id != alice.id


async def test_retry_failed_skips_only_for_the_tenants_own_active_job(tenants: Tenants) -> None:
    target = _target()
    tenants.service.gateway.script = lambda _job, _attempt: Fail(
        grpc.StatusCode.INVALID_ARGUMENT, "no good"
    )
    failed = (await tenants.enqueue("alice-svc", card_request(target, SAMPLE_TEXT))).job
    assert (await _terminal(tenants, "alice-svc", failed.id)).status == pb.JOB_STATUS_FAILED
    tenants.service.gateway.script = lambda _job, _attempt: Hang()
    # Bob's active job of the same target holds no slot of alice's.
    bob = (await tenants.enqueue("bob", card_request(target, SAMPLE_TEXT))).job
    retried = await tenants.service.stub.RetryFailed(
        pb.RetryFailedRequest(job_ids=[failed.id]), metadata=tenants.as_("operator"), timeout=10
    )
    assert list(retried.job_ids) == [failed.id] and not retried.skipped
    assert bob.id not in retried.SerializeToString().decode(errors="replace")


async def test_auth_off_keeps_one_tenant(start_service: StartService) -> None:
    service = await start_service()
    service.gateway.script = lambda _job, _attempt: Hang()
    target = _target()
    first = await service.stub.Enqueue(
        card_request(target, SAMPLE_TEXT, requested_by="alice-svc", request_id="rid-off"),
        timeout=10,
    )
    same = await service.stub.Enqueue(
        card_request(_target(), SAMPLE_TEXT, requested_by="bob", request_id="rid-off"),
        timeout=10,
    )
    assert same.deduplicated and same.job.id == first.job.id
    existing = await service.stub.Enqueue(
        card_request(target, SAMPLE_TEXT, requested_by="bob", on_duplicate=RETURN), timeout=10
    )
    assert existing.deduplicated and existing.job.id == first.job.id
